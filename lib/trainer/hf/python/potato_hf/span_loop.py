"""hf-span: fine-tunes a transformers token classifier (LoRA through peft
by default, or every weight) on a span schema's spans, as BIO tags of a
fast tokenizer's tokens (spans.py), and predicts spans in the characters
of each item's text. The device, precision, seeds, early stopping and
saved files are hf-text-classification's (loop, device, artifacts)."""

import gc
import json
import math
import os
import random
import time

from . import curve
from .artifacts import MODEL_CARD_FORMAT, publish, remove_partial, write_json, model_dir_name, PARTIAL_PREFIX
from .data import chunks, read_bundle
from .device import choose_precision, grad_scaler, is_oom, resolve_device, set_seed
from .hub import pretrained
from .loop import PREDICT_BATCH_FACTOR, BestState, flush_denormal, grouped_order, linear_schedule, peak_memory
from .models import _dtype_kw, _conv1d_class, clamp_max_length, lora_targets, with_attention_dropout
from .packages import check_versions, import_packages, needed_packages
from .spans import IGNORE, decode, display_text, learn_spans, merge_windows, prediction_row, tag_names, token_tags
from .spec import (AUTO_MAX_LENGTH_CAP, AUTO_MAX_LENGTH_CAP_CPU, EXIT_BAD_SPEC, EXIT_OUT_OF_MEMORY, TrainerError,
                   auto_max_length, epochs_for, learning_rate_for, parse_params)

TRAINER = "hf-span"
MODEL_VERSION = "hf-span/1"
# The overlap of two windows of a long item, in tokens, by default: a
# quarter of a window.
STRIDE_SHARE = 0.25


def check_span_schemas(spec):
    for s in spec["schemas"]:
        if s.get("kind") != "span":
            raise TrainerError(EXIT_BAD_SPEC, "validation_failed",
                               "schema %s is %s (%s): %s learns span schemas" % (
                                   s.get("name"), s.get("kind"), s.get("annotation_type"), TRAINER))


def span_params(raw):
    """parse_params' params, and stride: tokens two windows share (default
    a quarter of a window, set once max_length is known)."""
    params = parse_params(raw)
    if params["lora"] is None:
        # LoRA whatever the model's size (its declaration in Go, hfSpanParams):
        # parse_params leaves the choice to hf-text-classification's loader.
        params["lora"] = True
    if params["model"].startswith("builtin:"):
        raise TrainerError(EXIT_BAD_SPEC, "bad_spec", "param model=%s: %s fine-tunes a transformers model: give "
                           "a model directory or name" % (params["model"], TRAINER))
    stride = (raw or {}).get("stride")
    if stride in (None, ""):
        params["stride"] = None
    else:
        try:
            params["stride"] = int(str(stride).strip())
        except ValueError:
            raise TrainerError(EXIT_BAD_SPEC, "bad_spec", "param stride=%r is not a whole number" % stride)
        if params["stride"] < 0:
            raise TrainerError(EXIT_BAD_SPEC, "bad_spec", "param stride=%r is not 0 or more" % stride)
    return params


class Windows:
    """A fast tokenizer's windows over texts: for each, its item's index,
    its token ids and its tokens' character offsets (special tokens
    (0, 0))."""

    def __init__(self, tok, texts, max_length, stride):
        self.item, self.ids, self.offsets = [], [], []
        if not texts:
            return
        enc = tok([t if t else " " for t in texts], truncation=True, max_length=max_length, stride=stride,
                  return_overflowing_tokens=True, return_offsets_mapping=True, return_special_tokens_mask=True,
                  verbose=False)
        self.item = list(enc["overflow_to_sample_mapping"])
        self.ids = [list(x) for x in enc["input_ids"]]
        # The tokens the tokenizer adds ([CLS], [SEP]) are (0, 0), whatever
        # offsets it gives them; [UNK] keeps its characters.
        self.offsets = [[(0, 0) if sp else tuple(o) for o, sp in zip(offs, mask)]
                        for offs, mask in zip(enc["offset_mapping"], enc["special_tokens_mask"])]

    def __len__(self):
        return len(self.ids)


def load_token_model(params, tags, torch, transformers, peft, env, ev):
    """(tokenizer, model, lora card or None, head parameters, save)."""
    src = params["model"]
    tok = pretrained(transformers.AutoTokenizer.from_pretrained, src, env)
    if not getattr(tok, "is_fast", False):
        raise TrainerError(EXIT_BAD_SPEC, "bad_spec", "the tokenizer of %s is not a fast tokenizer: %s needs one "
                           "for the character offsets of its tokens" % (src, TRAINER))
    config = pretrained(transformers.AutoConfig.from_pretrained, src, env, num_labels=len(tags),
                        id2label={i: t for i, t in enumerate(tags)}, label2id={t: i for i, t in enumerate(tags)})
    # Attention dropout as hf-text-classification sets it (models.py): at
    # 0, its default, the fused attention kernel runs while training.
    model = with_attention_dropout(config, params["attention_dropout"], ev, lambda: pretrained(
        transformers.AutoModelForTokenClassification.from_pretrained, src, env, config=config,
        ignore_mismatched_sizes=True, **_dtype_kw(transformers, torch)))
    model.float()
    lora = None
    if params["lora"]:
        targets, why, conv = lora_targets(model, config, params["target_modules"], torch, _conv1d_class(transformers))
        head = [n for n, _ in model.named_children() if n == "classifier"]
        lkw = dict(task_type=peft.TaskType.TOKEN_CLS, r=params["lora_r"], lora_alpha=params["lora_alpha"],
                   lora_dropout=params["lora_dropout"], target_modules=targets, modules_to_save=head or None)
        if conv:
            lkw["fan_in_fan_out"] = True
        model = peft.get_peft_model(model, peft.LoraConfig(**lkw))
        lora = {"r": params["lora_r"], "alpha": params["lora_alpha"], "dropout": params["lora_dropout"],
                "target_modules": targets, "modules_to_save": head, "why": why}
    head_params = [p for n, p in model.named_parameters() if p.requires_grad and (
        "lora_" not in n if lora is not None else n.split(".")[0] == "classifier")]

    def save(out_dir):
        os.makedirs(out_dir, exist_ok=True)
        if lora is not None and params["merge"]:
            model.save_pretrained(os.path.join(out_dir, "adapter"))
            tok.save_pretrained(os.path.join(out_dir, "adapter"))
            model.merge_and_unload().save_pretrained(out_dir)
        else:
            model.save_pretrained(out_dir)
            if lora is not None:
                config.save_pretrained(out_dir)
        tok.save_pretrained(out_dir)
    return tok, config, model, lora, head_params, save


def setup(spec, ev, env, params):
    """Imports the packages and picks the device and precision: (mods,
    torch, device, amp, precision, versions)."""
    names = needed_packages(params)
    check_versions(names)
    mods = dict(zip(names, import_packages(names, "for model=%s%s" % (
        params["model"], " with LoRA" if "peft" in names else ""))))
    torch = mods["torch"]
    limits = spec["limits"]
    if limits.get("num_threads"):
        torch.set_num_threads(int(limits["num_threads"]))
    set_seed(torch, int(spec.get("seed") or 0))
    if hasattr(torch.backends, "cudnn"):
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    mps = getattr(torch.backends, "mps", None)
    device_name, warn = resolve_device(limits.get("device"), env, cuda_count,
                                       bool(mps is not None and mps.is_available()))
    if warn:
        ev.log("warning", warn)
    device = torch.device(device_name)
    cap = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    precision, warn = choose_precision(params["precision"], device.type, cap)
    if warn:
        ev.log("warning", warn)
    amp = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    versions = {n: getattr(m, "__version__", "?") for n, m in mods.items()}
    ev.log("info", "%s: %s, device %s, precision %s, %d threads" % (
        TRAINER, ", ".join("%s %s" % kv for kv in versions.items()), device_name, precision, torch.get_num_threads()))
    return mods, torch, device, amp, precision, versions


def span_examples(rows, schema, labels):
    """(instance_id, text, spans, dropped) of the rows with a target for
    the schema (a list of spans, maybe empty)."""
    out = []
    for r in rows:
        t = r["targets"].get(schema["name"])
        if not isinstance(t, list):
            continue
        text = display_text(r["text"])
        kept, dropped = learn_spans(t, labels, len(text))
        out.append((r["instance_id"], text, kept, dropped))
    return out


def span_labels(schema, manifest, rows):
    """The schema's labels as configured, then any other that a training
    span names, sorted."""
    out = [l for i, l in enumerate(schema.get("labels") or []) if l not in (schema.get("labels") or [])[:i]]
    extra = set()
    for r in rows:
        for s in r["targets"].get(schema["name"]) or []:
            l = s.get("name") or s.get("label") if isinstance(s, dict) else None
            if isinstance(l, str) and l and l not in out:
                extra.add(l)
    return out + sorted(extra)


def train(spec, ev, stop, env=None):
    env = os.environ if env is None else env
    params = span_params(spec["params"])
    check_span_schemas(spec)
    mods, torch, device, amp, precision, versions = setup(spec, ev, env, params)
    ev.status("loading", "reading the bundle")
    manifest, splits = read_bundle(spec["bundle_dir"])
    workdir = spec["workdir"]
    os.makedirs(workdir, exist_ok=True)
    seed = int(spec.get("seed") or 0)
    plans = []
    for s in spec["schemas"]:
        labels = span_labels(s, manifest, splits.get("train", []))
        train_ex = span_examples(splits.get("train", []), s, labels)
        if len(train_ex) < 2 or not any(ex[2] for ex in train_ex):
            raise TrainerError(EXIT_BAD_SPEC, "validation_failed",
                               "schema %s has %d labelled training items, %d with a span: %s needs at least 2 "
                               "items and a span" % (s["name"], len(train_ex), sum(1 for e in train_ex if e[2]),
                                                     TRAINER))
        plans.append((s, labels, train_ex, None))
    if spec.get("curve"):
        plans = curve_plans(spec, plans, seed, splits)
    pred_path = os.path.join(workdir, "predictions.jsonl")
    tmp_pred = pred_path + ".tmp"
    metrics, orders, n_pred, saved, clock = {}, {}, 0, [], {"steps": 0, "fit_s": 0.0, "pred_n": 0, "pred_s": 0.0}
    start = time.time()
    oom = None
    try:
        with open(tmp_pred, "w", encoding="utf-8") as pf:
            for i, (s, labels, train_ex, point) in enumerate(plans):
                if point is not None:
                    test = splits.get("test", [])
                    tagged = curve.TaggedFile(pf, point[0], len(train_ex), {r["instance_id"] for r in test},
                                              point[1])
                    ev.log("info", "curve: %s at %s%% of the train split, %d items, draw %d" % (
                        s["name"], curve.label(point[0]), len(train_ex), point[1] + 1))
                    scratch = []
                    fit_schema(spec, params, s, labels, train_ex, {"val": splits.get("val", []), "test": test},
                               mods, torch, device, amp, precision, versions, env, ev, stop, tagged, metrics,
                               scratch, clock)
                    for partial, _ in scratch:
                        import shutil
                        shutil.rmtree(partial, ignore_errors=True)
                    n_pred += tagged.written
                    continue
                n_pred += fit_schema(spec, params, s, labels, train_ex, splits, mods, torch, device, amp,
                                     precision, versions, env, ev, stop, pf, metrics, saved, clock)
                orders[s["name"]] = labels
                gc.collect()
            pf.flush()
            os.fsync(pf.fileno())
        stop.check()
        publish(saved, tmp_pred, pred_path, workdir, ev)
    except BaseException as e:
        if os.path.exists(tmp_pred):
            os.remove(tmp_pred)
        remove_partial(workdir)
        if not is_oom(torch, e):
            raise
        oom = "%s ran out of memory (%s)" % (device.type, str(e).splitlines()[0][:300] if str(e) else type(e).__name__)
    if oom is not None:
        gc.collect()
        raise TrainerError(EXIT_OUT_OF_MEMORY, "out_of_memory",
                           "%s with batch_size %d: lower it or max_length (--param batch_size=N, --param "
                           "max_length=N)" % (oom, params["batch_size"]))
    metrics["fit_seconds"] = time.time() - start
    metrics["steps"] = clock["steps"]
    metrics["steps_per_s"] = clock["steps"] / max(clock["fit_s"], 1e-9)
    if clock["pred_n"]:
        metrics["predict_items_per_s"] = clock["pred_n"] / max(clock["pred_s"], 1e-9)
    metrics.update(peak_memory(torch, device))
    ev.result(metrics, orders, "predictions.jsonl", n_pred, precision=precision, device=str(device))


def curve_plans(spec, plans, seed, splits):
    """A curve's plans, as loop.curve_plans makes them: one fit for each
    draw and point, on curve.subset of the schema's training items."""
    points = spec["curve"]
    curve.check_points(points)
    draws = curve.check_draws(spec.get("curve_draws"))
    if not splits.get("test"):
        raise TrainerError(EXIT_BAD_SPEC, "validation_failed", "curve: the bundle has no test split to score the points on")
    out = []
    for s, labels, train_ex, _ in plans:
        for d in range(draws):
            for p in points:
                sub = curve.subset(train_ex, curve.draw_seed(seed, d), p)
                if len(sub) < 2 or not any(ex[2] for ex in sub):
                    raise TrainerError(EXIT_BAD_SPEC, "validation_failed",
                                       "schema %s: curve point %s%% has %d labelled training items: %s needs at "
                                       "least 2 items and a span; give later points" % (
                                           s["name"], curve.label(p), len(sub), TRAINER))
                out.append((s, labels, sub, (p, d)))
    return out


def choose_window(params, tok, config, texts, device_type, ev):
    """max_length (a window's tokens, special tokens included) and stride."""
    if params["max_length"] is not None:
        n, why = clamp_max_length(params["max_length"], config, getattr(tok, "model_max_length", None))
        if why:
            ev.log("warning", why)
    else:
        cap = AUTO_MAX_LENGTH_CAP_CPU if device_type == "cpu" else AUTO_MAX_LENGTH_CAP
        limit, _ = clamp_max_length(cap, config, getattr(tok, "model_max_length", None))
        lengths = [len(x) + 2 for x in tok(list(texts) or [" "], add_special_tokens=False,
                                           verbose=False)["input_ids"]]
        n, pct = auto_max_length(lengths, limit)
        ev.log("info", "max_length %d: the 95th percentile of the token lengths of the train split's %d items is %d, "
               "rounded up to a multiple of 8, at most %d; %d longer items are cut into windows (--param "
               "max_length=N sets it)" % (n, len(lengths), pct, limit, sum(1 for x in lengths if x > n)))
    stride = params["stride"]
    if stride is None:
        stride = int(n * STRIDE_SHARE)
    # The tokenizer needs the stride below a window's own tokens.
    stride = max(0, min(stride, n - 3 - 1))
    return n, stride


def fit_schema(spec, params, s, labels, train_ex, splits, mods, torch, device, amp, precision, versions, env, ev,
               stop, pf, metrics, saved, clock):
    """Fits one span schema's model, saves it (appending to saved), writes
    its predictions of every split but train to pf and returns how many."""
    name = s["name"]
    tags = tag_names(labels)
    tag_index = {t: i for i, t in enumerate(tags)}
    dropped = sum(ex[3] for ex in train_ex)
    if dropped:
        ev.log("warning", "%s: %d training spans overlap a span kept and are not learnt (a token has one tag: of "
               "overlapping spans the one starting first, the longer on a tie, is learnt)" % (name, dropped))
    set_seed(torch, int(spec.get("seed") or 0))
    tok, config, model, lora, head, save = load_token_model(params, tags, torch, mods["transformers"],
                                                            mods.get("peft"), env, ev)
    n_params = sum(p.numel() for p in model.parameters())
    if params.get("auto_learning_rate"):
        params = dict(params, learning_rate=learning_rate_for(params["lora"], n_params))
    max_len, stride = choose_window(params, tok, config, [ex[1] for ex in train_ex], device.type, ev)
    model.to(device)

    def windows_of(examples):
        w = Windows(tok, [ex[1] for ex in examples], max_len, stride)
        ys = [token_tags(w.offsets[k], examples[w.item[k]][2], tag_index, examples[w.item[k]][1])
              for k in range(len(w))]
        return w, ys
    val_ex = span_examples(splits.get("val", []), s, labels)
    tr_w, tr_y = windows_of(train_ex)
    va_w, va_y = windows_of(val_ex)
    bs = params["batch_size"]
    epochs = epochs_for(params, len(tr_w))
    steps = math.ceil(len(tr_w) / bs) * epochs
    ev.log("info", "%s: %d items in %d windows of at most %d tokens (overlap %d), %d tags; %s; learning rate %g, "
           "%g for the head; %d epochs at most" % (
               name, len(train_ex), len(tr_w), max_len, stride, len(tags),
               "LoRA on " + ",".join(lora["target_modules"]) if lora else "full fine-tuning",
               params["learning_rate"], params["head_learning_rate"], epochs))
    ev.status("fitting", "fitting %s on %d items" % (name, len(train_ex)))
    head_ids = {id(p) for p in head}
    trainable = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": ps, "lr": lr} for ps, lr in (
        ([p for p in trainable if id(p) not in head_ids], params["learning_rate"]),
        ([p for p in trainable if id(p) in head_ids], params["head_learning_rate"])) if ps]
    opt = torch.optim.AdamW(groups, lr=params["learning_rate"], weight_decay=params["weight_decay"])
    sched = linear_schedule(torch, opt, int(params["warmup_ratio"] * steps), steps)
    scaler = grad_scaler(torch) if precision == "fp16" else None
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=IGNORE)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0

    def batch(w, ys, idx):
        width = max(len(w.ids[j]) for j in idx)
        inp = torch.full((len(idx), width), pad, dtype=torch.long)
        att = torch.zeros((len(idx), width), dtype=torch.long)
        lab = torch.full((len(idx), width), IGNORE, dtype=torch.long)
        for r, j in enumerate(idx):
            n = len(w.ids[j])
            inp[r, :n] = torch.tensor(w.ids[j])
            att[r, :n] = 1
            if ys is not None:
                lab[r, :n] = torch.tensor(ys[j])
        return inp.to(device), att.to(device), lab.to(device)

    def forward(inp, att):
        if amp is not None:
            with torch.autocast(device_type="cuda", dtype=amp):
                out = model(input_ids=inp, attention_mask=att)
        else:
            out = model(input_ids=inp, attention_mask=att)
        return out.logits.float()

    def evaluate():
        model.eval()
        tot, n = 0.0, 0
        with torch.no_grad():
            for i in range(0, len(va_w), bs):
                stop.check()
                idx = list(range(i, min(i + bs, len(va_w))))
                inp, att, lab = batch(va_w, va_y, idx)
                logits = forward(inp, att)
                tot += loss_fn(logits.reshape(-1, len(tags)), lab.reshape(-1)).item() * len(idx)
                n += len(idx)
        model.train()
        return tot / max(n, 1)

    gen = random.Random(int(spec.get("seed") or 0))
    tr_lengths = [len(x) for x in tr_w.ids]
    best = BestState(model, torch, device)
    best_loss, bad, best_epoch, kept, epoch = float("inf"), 0, 0, False, 0
    for epoch in range(1, epochs + 1):
        model.train()
        # Batches of windows of about one length (loop.grouped_order, as
        # transformers' group_by_length), each padded to its longest.
        order = grouped_order(tr_lengths, bs, gen)
        tot, n = 0.0, 0
        t0 = time.time()
        for i in range(0, len(order), bs):
            stop.check()
            idx = order[i:i + bs]
            inp, att, lab = batch(tr_w, tr_y, idx)
            loss = loss_fn(forward(inp, att).reshape(-1, len(tags)), lab.reshape(-1))
            opt.zero_grad(set_to_none=True)
            if scaler is not None:
                scaler.scale(loss).backward()
                if params["max_grad_norm"] > 0:
                    scaler.unscale_(opt)
                    torch.nn.utils.clip_grad_norm_(trainable, params["max_grad_norm"])
                scaler.step(opt)
                scaler.update()
            else:
                loss.backward()
                if params["max_grad_norm"] > 0:
                    torch.nn.utils.clip_grad_norm_(trainable, params["max_grad_norm"])
                opt.step()
            sched.step()
            tot += loss.item() * len(idx)
            n += len(idx)
            clock["steps"] += 1
            now = time.time()
            if now - clock.get("last", 0.0) >= 0.2 or i + bs >= len(order):
                clock["last"] = now
                ev.progress("fit", epoch * len(order) - len(order) + i + len(idx), epochs * len(order))
        clock["fit_s"] += time.time() - t0
        ev.metric("train", name + "/loss", tot / max(n, 1), epoch)
        if not len(va_w):
            continue
        vloss = evaluate()
        ev.metric("val", name + "/loss", vloss, epoch)
        if vloss < best_loss:
            best_loss, best_epoch, bad = vloss, epoch, 0
            if epoch < epochs:
                best.keep()
                kept = True
            else:
                kept = False
        else:
            bad += 1
            if params["patience"] >= 0 and bad > params["patience"]:
                ev.log("info", "%s: val loss has not improved for %d epochs: stopping after epoch %d" % (
                    name, bad, epoch))
                break
    if kept and best_epoch != epoch:
        best.restore()
    if best_epoch:
        metrics[name + "/best_epoch"] = best_epoch
        metrics[name + "/val_loss"] = best_loss
    del best, opt, sched
    model.eval()
    card = {"format": MODEL_CARD_FORMAT, "v": 1, "trainer": TRAINER, "model_version": MODEL_VERSION,
            "run_id": spec.get("run_id", ""), "schema": name, "kind": "span",
            "annotation_type": s.get("annotation_type", ""), "labels": labels, "tags": tags,
            "id2label": {str(i): t for i, t in enumerate(tags)}, "label2id": tag_index,
            "problem_type": "token_classification", "base_model": params["model"], "lora": lora,
            "merged": bool(lora and params["merge"]), "max_length": max_len, "stride": stride,
            "tokenizer": "the model's", "precision": precision, "seed": int(spec.get("seed") or 0),
            "train_items": len(train_ex), "val_items": len(val_ex), "best_epoch": best_epoch or None,
            "packages": versions, "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "params": {k: v for k, v in params.items() if k in spec["params"]}}
    final_dir = os.path.join(spec["workdir"], model_dir_name(name))
    out_dir = os.path.join(spec["workdir"], PARTIAL_PREFIX + model_dir_name(name))
    save(out_dir)
    write_json(os.path.join(out_dir, "labels.json"), {"schema": name, "kind": "span", "labels": labels, "tags": tags})
    write_json(os.path.join(out_dir, "model_card.json"), card)
    saved.append((out_dir, final_dir))
    if lora and not params["merge"] and hasattr(model, "merge_adapter"):
        try:
            model.merge_adapter()
        except Exception as e:  # noqa: BLE001 - predicting unmerged is slower, not wrong
            ev.log("warning", "%s: predicting with the adapter unmerged: merging it failed: %s" % (name, e))
    ev.status("predicting", "predicting %s" % name)
    t0 = time.time()
    n_pred = 0
    # As hf-text-classification predicts (loop.predict): PREDICT_BATCH_FACTOR
    # times batch_size windows at a time, a chunk's windows sorted by
    # length, so that a batch pads little, denormals flushed on a CPU.
    pbs = PREDICT_BATCH_FACTOR * bs
    for split in sorted(splits):
        if split == "train":
            continue
        for rows in chunks(splits[split], 1024):
            w = Windows(tok, [display_text(r["text"]) for r in rows], max_len, stride)
            per_item = [[] for _ in rows]
            by_length = sorted(range(len(w)), key=lambda j: len(w.ids[j]))
            with torch.inference_mode(), flush_denormal(torch, device):
                for i in range(0, len(w), pbs):
                    stop.check()
                    idx = by_length[i:i + pbs]
                    inp, att, _ = batch(w, None, idx)
                    probs = torch.softmax(forward(inp, att).double(), dim=-1).cpu().tolist()
                    for r, j in enumerate(idx):
                        k = len(w.ids[j])
                        per_item[w.item[j]].append((j, w.offsets[j], probs[r][:k]))
            for row, wins in zip(rows, per_item):
                # An item's windows in their order, as merge_windows breaks
                # a tie by it.
                spans, conf = decode(merge_windows([x[1:] for x in sorted(wins, key=lambda x: x[0])]), tags)
                pf.write(json.dumps(prediction_row(row["instance_id"], name, spans, conf), separators=(",", ":"),
                                    ensure_ascii=False) + "\n")
            n_pred += len(rows)
    clock["pred_n"] += n_pred
    clock["pred_s"] += time.time() - t0
    return n_pred
