#!/usr/bin/env python3
"""The hf-text-classification trainer of potato-training.

Fine-tunes a transformers sequence classifier, with LoRA through peft by
default, on a run's bundle, and speaks the v1 event protocol of
potato-events(5) on standard output:

    python3 hf_text_classification.py --spec spec.json

potato-agent(1) documents its parameters, outputs and exit codes.

The parts that need no torch (the spec, the bundle, the events, the
prediction rows, the fallback tokenizer, the device choice) are plain
functions of this module, importable with the standard library alone;
torch, transformers and peft are imported inside train(). Python 3.8 or
newer.
"""

import argparse
import importlib
import importlib.util
import json
import math
import os
import random
import re
import signal
import sys
import time
import zlib

TRAINER = "hf-text-classification"
MODEL_VERSION = "hf-text-classification/1"
# Import names, in the order lib/backend/ssh's TrainerPackages lists them.
PACKAGES = ("torch", "transformers", "peft")
# lib/probe's ImportErrorFormat and InstallHintFormat (SPEC F4).
IMPORT_ERROR = "Trainer '%s' could not be imported"
INSTALL_HINT = "pip install %s"
DEFAULT_MODEL = "distilbert-base-uncased"

EXIT_FINISHED = 0
EXIT_UNEXPECTED = 1
EXIT_BAD_SPEC = 2
EXIT_MISSING_DEPENDENCY = 3
EXIT_CANCELLED = 4
EXIT_OUT_OF_MEMORY = 5

# Files that mean a model directory holds a tokenizer of its own.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt",
                   "vocab.json", "spiece.model", "sentencepiece.bpe.model")
# Files that mean a model directory holds weights; a directory without any
# is built from its config.json with random weights.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack")

# LoRA target modules by config.model_type: the attention's query and value
# projections, as each architecture names them.
LORA_TARGETS = {
    "bert": ["query", "value"],
    "roberta": ["query", "value"],
    "xlm-roberta": ["query", "value"],
    "camembert": ["query", "value"],
    "electra": ["query", "value"],
    "albert": ["query", "value"],
    "mpnet": ["q", "v"],
    "distilbert": ["q_lin", "v_lin"],
    "deberta": ["in_proj"],
    "deberta-v2": ["query_proj", "value_proj"],
    "modernbert": ["Wqkv"],
    "gpt2": ["c_attn"],
    "bart": ["q_proj", "v_proj"],
    "mbart": ["q_proj", "v_proj"],
    "t5": ["q", "v"],
    "mt5": ["q", "v"],
    "llama": ["q_proj", "v_proj"],
    "mistral": ["q_proj", "v_proj"],
    "qwen2": ["q_proj", "v_proj"],
    "gemma": ["q_proj", "v_proj"],
    "phi": ["q_proj", "v_proj"],
}
# The fallback for another architecture: linear layers whose own name is one
# of these; when none is, every linear layer but the classification head.
LORA_FALLBACK_NAMES = ("query", "value", "q_proj", "v_proj", "q_lin", "v_lin",
                       "c_attn", "Wqkv", "qkv", "query_key_value", "q", "v")
HEAD_NAMES = ("classifier", "score", "pre_classifier", "classification_head")


class TrainerError(Exception):
    """A failure with its exit code and error code (potato-events(5))."""

    def __init__(self, exit_code, code, message, hint=""):
        Exception.__init__(self, message)
        self.exit_code = exit_code
        self.code = code
        self.message = message
        self.hint = hint


class Cancelled(Exception):
    """SIGTERM arrived: stop without a result."""


# ---------------------------------------------------------------- events


def _finite(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def event_line(kind, fields, t=None):
    """One v1 event as a line: v, event and t first, then the fields."""
    if t is None:
        t = time.time()
    obj = {"v": 1, "event": kind, "t": round(t, 3)}
    for k, v in fields.items():
        if k not in obj:
            obj[k] = _finite(v)
    return json.dumps(obj, separators=(",", ":"), allow_nan=False, ensure_ascii=False) + "\n"


class Events:
    """Writes events, one whole line per write, flushed at once."""

    def __init__(self, stream):
        self.stream = stream

    def emit(self, kind, **fields):
        self.stream.write(event_line(kind, fields))
        self.stream.flush()

    def status(self, state, step):
        self.emit("status", state=state, step=step)

    def progress(self, phase, current, total, eta_s=None):
        f = {"phase": phase, "current": current, "total": total}
        if eta_s is not None and eta_s >= 0:
            f["eta_s"] = round(eta_s, 1)
        self.emit("progress", **f)

    def metric(self, split, name, value, step):
        self.emit("metric", split=split, name=name, value=value, step=step)

    def log(self, level, msg):
        self.emit("log", level=level, msg=msg)

    def artifact(self, path, nbytes):
        self.emit("artifact", path=path, bytes=nbytes)

    def result(self, metrics, label_order, predictions_file, n_predictions):
        self.emit("result", status="success", model_version=MODEL_VERSION, metrics=metrics,
                  label_order=label_order, predictions_file=predictions_file,
                  n_predictions=n_predictions)

    def error(self, code, message, hint=""):
        f = {"code": code, "message": message}
        if hint:
            f["install_hint"] = hint
        self.emit("error", **f)


# ---------------------------------------------------------------- spec and params


def read_spec(path):
    """Reads and checks spec.json (TrainingSpec v1)."""
    try:
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
    except (OSError, ValueError) as e:
        raise TrainerError(EXIT_BAD_SPEC, "bad_spec", "%s: %s" % (path, e))
    if not isinstance(spec, dict):
        raise TrainerError(EXIT_BAD_SPEC, "bad_spec", "%s: not a JSON object" % path)
    if spec.get("v") != 1:
        raise TrainerError(EXIT_BAD_SPEC, "bad_spec", "%s: version %r, want 1" % (path, spec.get("v")))
    if spec.get("trainer") != TRAINER:
        raise TrainerError(EXIT_BAD_SPEC, "unknown_trainer",
                           "%s: trainer %r is not %s" % (path, spec.get("trainer"), TRAINER))
    if not spec.get("schemas"):
        raise TrainerError(EXIT_BAD_SPEC, "bad_spec", "%s: no schemas" % path)
    if not spec.get("bundle_dir") or not spec.get("workdir"):
        raise TrainerError(EXIT_BAD_SPEC, "bad_spec", "%s: bundle_dir and workdir are required" % path)
    spec.setdefault("params", {})
    spec.setdefault("limits", {})
    if spec["params"] is None:
        spec["params"] = {}
    if spec["limits"] is None:
        spec["limits"] = {}
    return spec


# name: (kind, default). Values arrive as strings (--param KEY=VALUE).
PARAMS = {
    "model": ("str", DEFAULT_MODEL),
    "lora": ("bool", True),
    "lora_r": ("int", 8),
    "lora_alpha": ("int", 16),
    "lora_dropout": ("float", 0.1),
    "target_modules": ("list", None),
    "epochs": ("int", 3),
    "batch_size": ("int", 16),
    "learning_rate": ("float", None),  # 2e-4 with LoRA, 2e-5 without
    "weight_decay": ("float", 0.01),
    "warmup_ratio": ("float", 0.06),
    "max_length": ("int", 128),
    "patience": ("int", 1),
    "precision": ("str", "auto"),
    "threshold": ("float", 0.5),
}


def _bad_param(key, value, what):
    return TrainerError(EXIT_BAD_SPEC, "bad_spec", "param %s=%r is not %s" % (key, value, what))


def parse_params(raw):
    """The spec's params, typed, with defaults. Unknown keys are ignored."""
    raw = raw or {}
    out = {}
    for key, (kind, default) in PARAMS.items():
        if key not in raw or raw[key] in (None, ""):
            out[key] = default
            continue
        v = raw[key]
        s = str(v).strip()
        if kind == "str":
            out[key] = s
        elif kind == "bool":
            if s.lower() in ("1", "true", "yes", "on"):
                out[key] = True
            elif s.lower() in ("0", "false", "no", "off"):
                out[key] = False
            else:
                raise _bad_param(key, v, "true or false")
        elif kind == "int":
            try:
                out[key] = int(s)
            except ValueError:
                raise _bad_param(key, v, "a whole number")
        elif kind == "float":
            try:
                x = float(s)
            except ValueError:
                raise _bad_param(key, v, "a number")
            if not math.isfinite(x):
                raise _bad_param(key, v, "a number")
            out[key] = x
        elif kind == "list":
            out[key] = [p.strip() for p in s.split(",") if p.strip()]
    for key in ("epochs", "batch_size", "max_length", "lora_r", "lora_alpha"):
        if out[key] < 1:
            raise _bad_param(key, raw.get(key), "1 or more")
    if out["learning_rate"] is None:
        out["learning_rate"] = 2e-4 if out["lora"] else 2e-5
    elif out["learning_rate"] <= 0:
        raise _bad_param("learning_rate", raw.get("learning_rate"), "more than 0")
    if out["precision"] not in ("auto", "fp32", "bf16", "fp16"):
        raise _bad_param("precision", raw.get("precision"), "auto, fp32, bf16 or fp16")
    if not 0 < out["threshold"] < 1:
        raise _bad_param("threshold", raw.get("threshold"), "between 0 and 1")
    return out


# ---------------------------------------------------------------- bundle


def read_bundle(bundle_dir):
    """manifest.json and every split file: (manifest, {split: [row]}).
    A row is {instance_id, text, targets}."""
    path = os.path.join(bundle_dir, "manifest.json")
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        raise TrainerError(EXIT_BAD_SPEC, "bad_bundle", "bundle: %s" % e)
    if not isinstance(manifest, dict) or manifest.get("v") != 1:
        raise TrainerError(EXIT_BAD_SPEC, "bad_bundle", "bundle: %s: unsupported manifest" % path)
    splits = {}
    for name, sf in sorted((manifest.get("splits") or {}).items()):
        rel = (sf or {}).get("path") or (name + ".jsonl")
        if os.path.isabs(rel) or ".." in rel.replace("\\", "/").split("/"):
            raise TrainerError(EXIT_BAD_SPEC, "bad_bundle",
                               "bundle: split %r: path %r leaves the bundle directory" % (name, rel))
        rows = []
        p = os.path.join(bundle_dir, rel)
        if os.path.exists(p):
            with open(p, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except ValueError as e:
                        raise TrainerError(EXIT_BAD_SPEC, "bad_bundle", "%s:%d: %s" % (os.path.basename(p), n, e))
                    if not isinstance(row, dict) or not isinstance(row.get("instance_id"), str):
                        raise TrainerError(EXIT_BAD_SPEC, "bad_bundle",
                                           "%s:%d: no instance_id" % (os.path.basename(p), n))
                    rows.append({"instance_id": row["instance_id"], "text": row.get("text") or "",
                                 "targets": row.get("targets") or {}})
        splits[name] = rows
    return manifest, splits


def label_order(schema, manifest, train_rows):
    """The schema's labels as configured, then, sorted, any other label the
    manifest or the training targets name: the model's output order."""
    name = schema["name"]
    out, seen = [], set()
    for l in schema.get("labels") or []:
        if l not in seen:
            seen.add(l)
            out.append(l)
    extra = set()
    for l in (manifest.get("labels") or {}).get(name) or []:
        if l not in seen:
            extra.add(l)
    for row in train_rows:
        t = row["targets"].get(name)
        for l in (t if isinstance(t, list) else [t]):
            if isinstance(l, str) and l and l not in seen:
                extra.add(l)
    return out + sorted(extra)


def examples(rows, schema, labels):
    """(instance_id, text, target) for the rows with a usable target: a
    label index (nominal) or a multi-hot list (multilabel)."""
    name, multi = schema["name"], schema.get("kind") == "multilabel"
    index = {l: i for i, l in enumerate(labels)}
    out = []
    for row in rows:
        t = row["targets"].get(name)
        if multi and isinstance(t, list):
            hot = [0.0] * len(labels)
            for l in t:
                if l in index:
                    hot[index[l]] = 1.0
            out.append((row["instance_id"], row["text"], hot))
        elif not multi and isinstance(t, str) and t in index:
            out.append((row["instance_id"], row["text"], index[t]))
    return out


def check_schemas(spec):
    for s in spec["schemas"]:
        if s.get("kind") not in ("nominal", "multilabel"):
            raise TrainerError(EXIT_BAD_SPEC, "validation_failed",
                               "schema %s is %s (%s): %s learns radio, select and multiselect schemas"
                               % (s.get("name"), s.get("kind"), s.get("annotation_type"), TRAINER))


# ---------------------------------------------------------------- predictions


def prediction_row(instance_id, schema_name, probs, labels, multilabel, threshold=0.5):
    """One line of predictions.jsonl. Nominal: the most probable label and
    its softmax probability. Multilabel: the labels of probability at least
    threshold, sorted, joined by "|", and as confidence the lowest, over all
    labels, of the probability of the choice made for it."""
    if multilabel:
        chosen = sorted(l for l, p in zip(labels, probs) if p >= threshold)
        conf = min([p if p >= threshold else 1.0 - p for p in probs] or [1.0])
        label = "|".join(chosen)
    else:
        best = max(range(len(probs)), key=lambda i: probs[i])
        label, conf = labels[best], probs[best]
    conf = float(conf)
    return {"instance_id": instance_id, "schema_name": schema_name,
            "payload": {"label": label, "confidence": conf}, "confidence": conf}


def softmax(xs):
    m = max(xs)
    es = [math.exp(x - m) for x in xs]
    s = sum(es)
    return [e / s for e in es]


def sigmoid(x):
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


# ---------------------------------------------------------------- tokenizer fallback


class HashTokenizer:
    """The tokenizer of a model directory that has none (a config.json
    alone, as built for a test): lowercased words and punctuation, each
    hashed (CRC-32) into the config's vocabulary, after [CLS] and before
    [SEP]. It needs no file and no download; its settings are saved beside
    the model as hash-tokenizer.json."""

    FORMAT = "potato-hash-tokenizer"
    WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)

    def __init__(self, vocab_size, pad_id=0, unk_id=1, cls_id=2, sep_id=3):
        self.vocab_size = vocab_size
        self.pad_id, self.unk_id, self.cls_id, self.sep_id = pad_id, unk_id, cls_id, sep_id
        self.first = max(pad_id, unk_id, cls_id, sep_id) + 1
        if vocab_size - self.first < 4:
            raise ValueError("vocab_size %d is too small for the fallback tokenizer" % vocab_size)

    def word_id(self, word):
        return self.first + zlib.crc32(word.encode("utf-8")) % (self.vocab_size - self.first)

    def encode(self, text, max_length):
        ids = [self.word_id(w) for w in self.WORD.findall(text.lower())]
        ids = [self.cls_id] + ids[:max(0, max_length - 2)] + [self.sep_id]
        return ids[:max_length]

    def settings(self):
        return {"format": self.FORMAT, "v": 1, "vocab_size": self.vocab_size, "lowercase": True,
                "pattern": self.WORD.pattern, "hash": "crc32", "pad_id": self.pad_id,
                "unk_id": self.unk_id, "cls_id": self.cls_id, "sep_id": self.sep_id}


def has_tokenizer(model_dir):
    return any(os.path.exists(os.path.join(model_dir, f)) for f in TOKENIZER_FILES)


def has_weights(model_dir):
    try:
        names = os.listdir(model_dir)
    except OSError:
        return False
    return any(n.endswith(WEIGHT_SUFFIXES) for n in names)


# ---------------------------------------------------------------- device


def resolve_device(requested, env, cuda_count, mps_ok):
    """The torch device to train on, and a warning ("" when none).

    requested is the spec's limits.device, else POTATO_TRAINING_DEVICE, else
    "auto". CUDA_VISIBLE_DEVICES set empty means the CPU. A dispatch that
    chose cuda:N sets CUDA_VISIBLE_DEVICES=N, so that GPU is cuda:0 here."""
    req = (requested or env.get("POTATO_TRAINING_DEVICE") or "auto").strip()
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() == "":
        cuda_count = 0
    if req == "auto":
        if cuda_count > 0:
            return "cuda:0", ""
        if mps_ok:
            return "mps", ""
        return "cpu", ""
    if req == "cpu":
        return "cpu", ""
    if req == "mps":
        if mps_ok:
            return "mps", ""
        return "cpu", "device mps is not available here: training on the CPU"
    if req == "cuda" or req.startswith("cuda:"):
        if cuda_count == 0:
            return "cpu", "device %s is not available here: training on the CPU" % req
        idx = req.partition(":")[2].split(",")[0] or "0"
        vis = [v.strip() for v in (visible or "").split(",") if v.strip()]
        if idx in vis:
            return "cuda:%d" % vis.index(idx), ""
        try:
            n = int(idx)
        except ValueError:
            n = 0
        if n < cuda_count:
            return "cuda:%d" % n, ""
        return "cuda:0", "device %s is not visible here: training on cuda:0" % req
    return "cpu", "device %r is unknown: training on the CPU" % req


# ---------------------------------------------------------------- dependencies


def missing_packages(find=importlib.util.find_spec):
    """The import names of PACKAGES that this interpreter cannot find."""
    out = []
    for name in PACKAGES:
        try:
            if find(name) is None:
                out.append(name)
        except (ImportError, ValueError):
            out.append(name)
    return out


def import_error(missing):
    """SPEC F4, worded as lib/probe's ImportError: (message, install hint)."""
    return IMPORT_ERROR % TRAINER, (INSTALL_HINT % " ".join(missing) if missing else "")


def import_packages():
    """torch, transformers and peft, or a missing_dependency error (F4)."""
    missing, detail = missing_packages(), ""
    if not missing:
        try:
            return tuple(importlib.import_module(n) for n in PACKAGES)
        except ImportError as e:
            top = (getattr(e, "name", None) or "").split(".")[0]
            missing = [top if top in PACKAGES else "torch"]
            detail = "importing the packages failed: %s" % e
    else:
        detail = "this interpreter (%s) has no %s" % (sys.executable, ", ".join(missing))
    msg, hint = import_error(missing)
    e = TrainerError(EXIT_MISSING_DEPENDENCY, "missing_dependency", msg, hint)
    e.detail = detail
    raise e


# ---------------------------------------------------------------- training


class Stop:
    """Set by SIGTERM or SIGINT; checked at every step and batch."""

    def __init__(self):
        self.requested = False

    def install(self):
        def handler(signum, frame):
            self.requested = True
        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def check(self):
        if self.requested:
            raise Cancelled()


def is_oom(torch, e):
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None and isinstance(e, oom):
        return True
    return isinstance(e, RuntimeError) and "out of memory" in str(e).lower()


def lora_targets(model, config, explicit):
    """LoRA's target modules: the param, else the table, else the fallback
    (linear layers named like attention projections, else every linear layer
    but the head)."""
    if explicit:
        return list(explicit), "param"
    mt = getattr(config, "model_type", "")
    if mt in LORA_TARGETS:
        return LORA_TARGETS[mt], "model type " + mt
    import torch
    found, linear = set(), set()
    for name, mod in model.named_modules():
        if not isinstance(mod, torch.nn.Linear):
            continue
        last = name.split(".")[-1]
        if any(h in name.split(".") for h in HEAD_NAMES):
            continue
        linear.add(last)
        if last in LORA_FALLBACK_NAMES:
            found.add(last)
    if found:
        return sorted(found), "fallback: attention projections"
    return sorted(linear), "fallback: every linear layer"


def _safe(name):
    return re.sub(r"[/\\\x00]", "_", name) or "_"


def _files_under(root, rel_base):
    out = []
    for d, _, files in os.walk(root):
        for f in sorted(files):
            p = os.path.join(d, f)
            out.append((os.path.relpath(p, rel_base), os.path.getsize(p)))
    return out


def train(spec, ev, stop):
    torch, transformers, peft = import_packages()
    params = parse_params(spec["params"])
    limits = spec["limits"]
    if limits.get("num_threads"):
        torch.set_num_threads(int(limits["num_threads"]))
    seed = int(spec.get("seed") or 0)
    random.seed(seed)
    torch.manual_seed(seed)
    cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    mps = getattr(torch.backends, "mps", None)
    mps_ok = bool(mps is not None and mps.is_available())
    device_name, warn = resolve_device(limits.get("device"), os.environ, cuda_count, mps_ok)
    if warn:
        ev.log("warning", warn)
    device = torch.device(device_name)
    amp = None
    if device.type == "cuda":
        if params["precision"] in ("auto", "bf16") and torch.cuda.is_bf16_supported():
            amp = torch.bfloat16
        elif params["precision"] in ("auto", "fp16"):
            amp = torch.float16
    ev.log("info", "%s: torch %s, transformers %s, peft %s, device %s%s, %d threads" % (
        TRAINER, torch.__version__, transformers.__version__, peft.__version__, device_name,
        {None: "", torch.bfloat16: " (bf16)", torch.float16: " (fp16)"}[amp], torch.get_num_threads()))

    ev.status("loading", "reading the bundle")
    manifest, splits = read_bundle(spec["bundle_dir"])
    check_schemas(spec)
    workdir = spec["workdir"]
    os.makedirs(workdir, exist_ok=True)
    model_src = params["model"]
    local_dir = os.path.isdir(model_src)

    # Tokenize once per run: the tokenizer does not depend on the schema.
    if local_dir and not has_tokenizer(model_src):
        cfg0 = transformers.AutoConfig.from_pretrained(model_src)
        pad = cfg0.pad_token_id if getattr(cfg0, "pad_token_id", None) is not None else 0
        unk, cls, sep = [i for i in range(4) if i != pad][:3]
        tok = HashTokenizer(cfg0.vocab_size, pad_id=pad, unk_id=unk, cls_id=cls, sep_id=sep)
        ev.log("info", "%s has no tokenizer: using the hashing tokenizer over its %d-word vocabulary"
               % (model_src, cfg0.vocab_size))

        def encode(texts):
            return [tok.encode(t, params["max_length"]) for t in texts]
        pad_id = tok.pad_id
        save_tok = lambda d: _write_json(os.path.join(d, "hash-tokenizer.json"), tok.settings())
    else:
        hf_tok = transformers.AutoTokenizer.from_pretrained(model_src)
        if hf_tok.pad_token is None:
            hf_tok.pad_token = hf_tok.eos_token or hf_tok.unk_token
        pad_id = hf_tok.pad_token_id

        def encode(texts):
            texts = list(texts)
            if not texts:
                return []
            return hf_tok(texts, truncation=True, max_length=params["max_length"])["input_ids"]
        save_tok = hf_tok.save_pretrained

    def batches(ids_list, order, bs):
        for i in range(0, len(order), bs):
            idx = order[i:i + bs]
            width = max(len(ids_list[j]) for j in idx)
            inp = torch.full((len(idx), width), pad_id, dtype=torch.long)
            att = torch.zeros((len(idx), width), dtype=torch.long)
            for r, j in enumerate(idx):
                seq = ids_list[j]
                inp[r, :len(seq)] = torch.tensor(seq, dtype=torch.long)
                att[r, :len(seq)] = 1
            yield idx, inp.to(device), att.to(device)

    pred_path = os.path.join(workdir, "predictions.jsonl")
    tmp_pred = pred_path + ".tmp"
    metrics, orders, n_pred = {}, {}, 0
    start = time.time()
    total_steps = 0
    plans = []
    for s in spec["schemas"]:
        labels = label_order(s, manifest, splits.get("train", []))
        train_ex = examples(splits.get("train", []), s, labels)
        if len(train_ex) < 2 or (s["kind"] == "nominal" and len({t for _, _, t in train_ex}) < 2):
            raise TrainerError(EXIT_BAD_SPEC, "validation_failed",
                               "schema %s has %d labelled training items: %s needs at least 2 items and 2 labels"
                               % (s["name"], len(train_ex), TRAINER))
        steps = math.ceil(len(train_ex) / params["batch_size"]) * params["epochs"]
        plans.append((s, labels, train_ex, steps))
        total_steps += steps
    done_steps, fit_start, last_progress = 0, time.time(), 0.0

    with open(tmp_pred, "w", encoding="utf-8") as pf:
        for s, labels, train_ex, steps in plans:
            name, multi = s["name"], s["kind"] == "multilabel"
            orders[name] = labels
            val_ex = examples(splits.get("val", []), s, labels)
            ev.status("fitting", "fitting %s on %d items" % (name, len(train_ex)))
            kw = {"num_labels": len(labels),
                  "id2label": {i: l for i, l in enumerate(labels)},
                  "label2id": {l: i for i, l in enumerate(labels)},
                  "problem_type": "multi_label_classification" if multi else "single_label_classification"}
            if local_dir and not has_weights(model_src):
                config = transformers.AutoConfig.from_pretrained(model_src, **kw)
                model = transformers.AutoModelForSequenceClassification.from_config(config)
                ev.log("info", "%s holds no weights: %s built from its config with random weights" % (model_src, name))
            else:
                model = transformers.AutoModelForSequenceClassification.from_pretrained(
                    model_src, ignore_mismatched_sizes=True, **kw)
                config = model.config
            if getattr(config, "pad_token_id", None) is None:
                config.pad_token_id = pad_id
            if params["lora"]:
                targets, why = lora_targets(model, config, params["target_modules"])
                # The head is new: train all of it (DistilBERT's has two
                # layers, and peft's default saves only "classifier").
                head = [n for n, _ in model.named_children() if n in HEAD_NAMES]
                lcfg = peft.LoraConfig(task_type=peft.TaskType.SEQ_CLS, r=params["lora_r"],
                                       lora_alpha=params["lora_alpha"], lora_dropout=params["lora_dropout"],
                                       target_modules=targets, modules_to_save=head or None)
                model = peft.get_peft_model(model, lcfg)
                n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
                ev.log("info", "LoRA on %s (%s): %d trainable parameters" % (",".join(targets), why, n_train))
            model.to(device)
            tr_ids = encode([t for _, t, _ in train_ex])
            va_ids = encode([t for _, t, _ in val_ex])
            if multi:
                tr_y = torch.tensor([y for _, _, y in train_ex], dtype=torch.float)
                va_y = torch.tensor([y for _, _, y in val_ex], dtype=torch.float) if val_ex else None
            else:
                tr_y = torch.tensor([y for _, _, y in train_ex], dtype=torch.long)
                va_y = torch.tensor([y for _, _, y in val_ex], dtype=torch.long) if val_ex else None
            trainable = [p for p in model.parameters() if p.requires_grad]
            opt = torch.optim.AdamW(trainable, lr=params["learning_rate"], weight_decay=params["weight_decay"])
            sched = transformers.get_linear_schedule_with_warmup(
                opt, int(params["warmup_ratio"] * steps), steps)
            scaler = torch.cuda.amp.GradScaler() if amp == torch.float16 else None
            loss_fn = torch.nn.BCEWithLogitsLoss() if multi else torch.nn.CrossEntropyLoss()
            gen = random.Random(seed)

            def forward(inp, att):
                if amp is not None:
                    with torch.autocast(device_type="cuda", dtype=amp):
                        return model(input_ids=inp, attention_mask=att).logits.float()
                return model(input_ids=inp, attention_mask=att).logits.float()

            def evaluate(ids_list, y):
                model.eval()
                tot, n, correct = 0.0, 0, 0
                with torch.no_grad():
                    for idx, inp, att in batches(ids_list, list(range(len(ids_list))), params["batch_size"]):
                        stop.check()
                        logits = forward(inp, att)
                        yy = y[idx].to(device)
                        tot += loss_fn(logits, yy).item() * len(idx)
                        n += len(idx)
                        if multi:
                            correct += int(((logits >= 0).float() == yy).all(dim=1).sum().item())
                        else:
                            correct += int((logits.argmax(dim=1) == yy).sum().item())
                model.train()
                return tot / max(n, 1), correct / max(n, 1)

            best, best_loss, bad_epochs, best_epoch = None, float("inf"), 0, 0
            keep = [k for k, p in model.named_parameters() if p.requires_grad]
            for epoch in range(1, params["epochs"] + 1):
                model.train()
                order = list(range(len(tr_ids)))
                gen.shuffle(order)
                tot, n = 0.0, 0
                for idx, inp, att in batches(tr_ids, order, params["batch_size"]):
                    stop.check()
                    logits = forward(inp, att)
                    loss = loss_fn(logits, tr_y[idx].to(device))
                    opt.zero_grad(set_to_none=True)
                    if scaler is not None:
                        scaler.scale(loss).backward()
                        scaler.step(opt)
                        scaler.update()
                    else:
                        loss.backward()
                        opt.step()
                    sched.step()
                    tot += loss.item() * len(idx)
                    n += len(idx)
                    done_steps += 1
                    now = time.time()
                    if now - last_progress >= 0.2 or done_steps == total_steps:
                        last_progress = now
                        rate = done_steps / max(now - fit_start, 1e-9)
                        ev.progress("fit", done_steps, total_steps, (total_steps - done_steps) / rate)
                ev.metric("train", name + "/loss", tot / max(n, 1), epoch)
                if not val_ex:
                    continue
                vloss, vacc = evaluate(va_ids, va_y)
                ev.metric("val", name + "/loss", vloss, epoch)
                ev.metric("val", name + "/accuracy", vacc, epoch)
                if vloss < best_loss:
                    best_loss, best_epoch, bad_epochs = vloss, epoch, 0
                    sd = model.state_dict()
                    best = {k: sd[k].detach().to("cpu", copy=True) for k in sd if k in keep or not params["lora"]}
                else:
                    bad_epochs += 1
                    if params["patience"] >= 0 and bad_epochs > params["patience"]:
                        ev.log("info", "%s: val loss has not improved for %d epochs: stopping after epoch %d"
                               % (name, bad_epochs, epoch))
                        done_steps += (params["epochs"] - epoch) * math.ceil(len(tr_ids) / params["batch_size"])
                        break
            if best is not None:
                model.load_state_dict(best, strict=False)
                metrics[name + "/best_epoch"] = best_epoch
            if val_ex:
                vloss, vacc = evaluate(va_ids, va_y)
                metrics[name + "/val_loss"] = vloss
                metrics[name + "/val_accuracy"] = vacc

            out_dir = os.path.join(workdir, "model-" + _safe(name))
            model.save_pretrained(out_dir)
            save_tok(out_dir)
            _write_json(os.path.join(out_dir, "labels.json"), {"schema": name, "kind": s["kind"], "labels": labels})
            for rel, size in _files_under(out_dir, workdir):
                ev.artifact(rel, size)

            ev.status("predicting", "predicting %s" % name)
            model.eval()
            for split in sorted(splits):
                if split == "train":
                    continue
                rows = splits[split]
                ids = encode([r["text"] for r in rows])
                with torch.no_grad():
                    for idx, inp, att in batches(ids, list(range(len(ids))), params["batch_size"]):
                        stop.check()
                        logits = forward(inp, att).cpu()
                        for r, j in enumerate(idx):
                            row = logits[r].tolist()
                            probs = [sigmoid(x) for x in row] if multi else softmax(row)
                            pf.write(json.dumps(prediction_row(rows[j]["instance_id"], name, probs, labels,
                                                               multi, params["threshold"]),
                                                separators=(",", ":"), ensure_ascii=False) + "\n")
                            n_pred += 1
            del model, opt
            if device.type == "cuda":
                torch.cuda.empty_cache()
        pf.flush()
        os.fsync(pf.fileno())
    os.replace(tmp_pred, pred_path)
    elapsed = time.time() - start
    metrics["fit_seconds"] = elapsed
    metrics["steps_per_s"] = done_steps / max(time.time() - fit_start, 1e-9)
    ev.result(metrics, orders, "predictions.jsonl", n_pred)


def _write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------- main


def main(argv=None, stdout=None, stderr=None):
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    ap = argparse.ArgumentParser(prog=TRAINER, description="Fine-tune a text classifier on a potato-training bundle.")
    ap.add_argument("--spec", required=True, help="the run's spec.json")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return EXIT_BAD_SPEC if e.code else EXIT_FINISHED
    ev = Events(stdout)
    stop = Stop()
    stop.install()
    try:
        spec = read_spec(args.spec)
        parse_params(spec["params"])
        check_schemas(spec)
        train(spec, ev, stop)
        return EXIT_FINISHED
    except Cancelled:
        ev.status("cancelled", "stopped on request")
        return EXIT_CANCELLED
    except TrainerError as e:
        detail = getattr(e, "detail", "")
        if detail:
            ev.log("error", detail)
        ev.error(e.code, e.message, e.hint)
        stderr.write("%s: error: %s\n" % (TRAINER, e.message))
        return e.exit_code
    except Exception as e:  # noqa: BLE001 - every failure becomes an error event
        torch = sys.modules.get("torch")
        if torch is not None and is_oom(torch, e):
            params = {}
            try:
                params = parse_params(read_spec(args.spec)["params"])
            except TrainerError:
                pass
            msg = ("the GPU ran out of memory with batch_size %s and max_length %s: "
                   "lower batch_size or max_length (--param batch_size=N, --param max_length=N)"
                   % (params.get("batch_size"), params.get("max_length")))
            ev.error("out_of_memory", msg)
            stderr.write("%s: error: %s\n" % (TRAINER, msg))
            return EXIT_OUT_OF_MEMORY
        ev.error("fit_failed", "%s: %s" % (type(e).__name__, e))
        import traceback
        traceback.print_exc(file=stderr)
        return EXIT_UNEXPECTED


if __name__ == "__main__":
    sys.exit(main())
