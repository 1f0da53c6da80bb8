"""The training loop: train reads the bundle, plans every schema's fit,
and for each one fit_schema loads the model, fits it with AdamW and a
linear schedule (early stopping on the val loss, the best epoch kept),
saves it and predicts every split but train. Needs torch alone; the
model comes from models.load_model. A cancel (Stop) is seen at the next
step or batch."""

import contextlib
import gc
import json
import math
import os
import random
import shutil
import signal
import sys
import time

from . import curve, ordinal
from .artifacts import model_card, publish, remove_partial, save_model
from .data import chunks, examples, label_order, prediction_row, read_bundle
from .device import choose_precision, grad_scaler, is_oom, resolve_device, set_seed
from .models import TokenizerCache, load_model
from .packages import check_versions, import_packages, needed_packages
from .spec import (AUTO_EPOCHS_MAX, AUTO_EPOCHS_STEPS, Cancelled, EXIT_BAD_SPEC, EXIT_OUT_OF_MEMORY, TRAINER,
                   TrainerError, check_schemas, class_weights, epochs_for, is_builtin, learning_rate_for,
                   parse_params)


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


def linear_schedule(torch, opt, warmup, total):
    """Linear warm-up to the learning rate, then linear decay to 0."""
    def mult(step):
        if step < warmup:
            return float(step + 1) / float(max(1, warmup))
        return max(0.0, float(total - step) / float(max(1, total - warmup)))
    return torch.optim.lr_scheduler.LambdaLR(opt, mult)


class BestState:
    """The trainable parameters of the best epoch so far, in buffers made
    once (pinned CPU memory beside a GPU) and refilled in place: no new
    state_dict copy each improving epoch, and nothing copied for an epoch
    that is the last."""

    def __init__(self, model, torch, device):
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.torch, self.device, self.bufs = torch, device, None

    def keep(self):
        with self.torch.no_grad():
            if self.bufs is None:
                pin = self.device.type == "cuda"
                self.bufs = [self.torch.empty(p.shape, dtype=p.dtype, device="cpu", pin_memory=pin)
                             for p in self.params]
            for b, p in zip(self.bufs, self.params):
                b.copy_(p.detach(), non_blocking=True)

    def restore(self):
        if self.bufs is None:
            return
        with self.torch.no_grad():
            for b, p in zip(self.bufs, self.params):
                p.copy_(b.to(p.device))


class Encoded:
    """Encoded texts held as tensors on the device, padded once: the token
    ids (int32, pad_id after each text's end) and each text's length. A
    batch is a gather of its rows cut to its longest text (rows, pieces),
    with no per-row Python work and no copy of the texts from the host
    (only the batch's row numbers). An empty text
    is the one token pad_id, attended to."""

    def __init__(self, torch, device, ids_list, pad_id):
        self.torch, self.device = torch, device
        self.lengths = [max(1, len(x)) for x in ids_list]
        width = max(self.lengths, default=1)
        ids = torch.full((len(ids_list), width), pad_id, dtype=torch.int32)
        if ids_list:
            lens = torch.tensor(self.lengths)
            mask = torch.arange(width)[None, :] < lens[:, None]
            ids[mask] = torch.tensor([t for x in ids_list for t in (x or [pad_id])], dtype=torch.int32)
        self.ids = ids.to(device)
        self.lens = torch.tensor(self.lengths).to(device)

    def __len__(self):
        return len(self.lengths)

    def rows(self, idx):
        """The batch of rows idx (a list): (the rows' index tensor on the
        device, input_ids, attention_mask), width the longest of them."""
        torch = self.torch
        width = max(self.lengths[j] for j in idx)
        sel = torch.tensor(idx).to(self.device)
        return sel, self.ids[sel, :width].long(), self.mask(self.lens[sel], width)

    def pieces(self, start, stop):
        """Rows start to stop, which are in order of length (predict):
        a slice, no gather."""
        width = max(self.lengths[start:stop])
        return self.ids[start:stop, :width].long(), self.mask(self.lens[start:stop], width)

    def mask(self, lens, width):
        return (self.torch.arange(width, device=self.device)[None, :] < lens[:, None]).long()


def batches(enc, order, bs):
    """(idx, sel, input_ids, attention_mask) of each batch of bs rows of
    enc in order (Encoded.rows)."""
    for i in range(0, len(order), bs):
        idx = order[i:i + bs]
        yield (idx,) + enc.rows(idx)


# A megabatch of length-grouped training batches (grouped_order): the
# rows sorted by length together, as transformers' group_by_length does.
GROUP_BATCHES = 50


def grouped_order(lengths, bs, gen):
    """An epoch's order of the training rows: shuffled, then each run of
    GROUP_BATCHES * bs rows sorted by length and cut into batches of bs,
    and the batches shuffled, the one shorter than bs, if any, last. A
    batch holds texts of about one length, so it is padded little, and
    there are as many batches as without grouping (ceil(rows / bs))."""
    order = list(range(len(lengths)))
    gen.shuffle(order)
    mega = GROUP_BATCHES * bs
    groups = []
    for i in range(0, len(order), mega):
        run = sorted(order[i:i + mega], key=lambda j: lengths[j])
        groups.extend(run[k:k + bs] for k in range(0, len(run), bs))
    gen.shuffle(groups)
    # The one short batch last, so that cutting the order into batches of
    # bs cuts along the groups.
    groups.sort(key=lambda g: len(g) < bs)
    return [j for g in groups for j in g]


def steps_per_epoch(n, params):
    """The optimizer's steps an epoch of n items makes: a step each
    grad_accum batches (1 unless the trainer has the param)."""
    return math.ceil(math.ceil(n / params["batch_size"]) / params.get("grad_accum", 1))


def train(spec, ev, stop, env=None):
    env = os.environ if env is None else env
    params = parse_params(spec["params"])
    names = needed_packages(params)
    check_versions(names)
    mods = dict(zip(names, import_packages(names, "for model=%s%s" % (
        params["model"], " with LoRA" if "peft" in names else ""))))
    torch = mods["torch"]
    limits = spec["limits"]
    if limits.get("num_threads"):
        torch.set_num_threads(int(limits["num_threads"]))
    seed = int(spec.get("seed") or 0)
    set_seed(torch, seed)
    if hasattr(torch.backends, "cudnn"):
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    mps = getattr(torch.backends, "mps", None)
    mps_ok = bool(mps is not None and mps.is_available())
    device_name, warn = resolve_device(limits.get("device"), env, cuda_count, mps_ok)
    if warn:
        ev.log("warning", warn)
    device = torch.device(device_name)
    cap = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    precision, warn = choose_precision(params["precision"], device.type, cap)
    if warn:
        ev.log("warning", warn)
    amp = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    where = device_name
    if device.type == "cuda":
        where += " (%s, compute capability %d.%d)" % (torch.cuda.get_device_name(device), cap[0], cap[1])
    versions = {n: getattr(m, "__version__", "?") for n, m in mods.items()}
    ev.log("info", "%s: %s, device %s, precision %s, %d threads" % (
        TRAINER, ", ".join("%s %s" % kv for kv in versions.items()), where, precision, torch.get_num_threads()))

    ev.status("loading", "reading the bundle")
    manifest, splits = read_bundle(spec["bundle_dir"])
    check_schemas(spec)
    workdir = spec["workdir"]
    os.makedirs(workdir, exist_ok=True)
    bs = params["batch_size"]

    plans, total_steps = [], 0
    for s in spec["schemas"]:
        labels = label_order(s, manifest, splits.get("train", []))
        train_ex = examples(splits.get("train", []), s, labels)
        if len(train_ex) < 2 or too_few_labels(s, train_ex):
            raise TrainerError(EXIT_BAD_SPEC, "validation_failed",
                               "schema %s has %d labelled training items: %s needs at least 2 items and 2 labels"
                               % (s["name"], len(train_ex), TRAINER))
        steps = steps_per_epoch(len(train_ex), params) * epochs_for(params, len(train_ex))
        plans.append((s, labels, train_ex, steps))
        total_steps += steps
    if spec.get("curve"):
        plans, total_steps = curve_plans(spec, plans, bs, params, seed, splits)

    pred_path = os.path.join(workdir, "predictions.jsonl")
    tmp_pred = pred_path + ".tmp"
    metrics, orders, n_pred = {}, {}, 0
    clock = {"done": 0, "real": 0, "fit_s": 0.0, "last": 0.0, "t0": time.time()}
    tok_cache = TokenizerCache()
    tok_cache.train_texts = [r["text"] for r in splits.get("train", [])]
    tok_cache.device_type = device.type
    start = time.time()
    oom = None
    saved = []  # (partial, final) directories of the models
    try:
        with open(tmp_pred, "w", encoding="utf-8") as pf:
            for s, labels, train_ex, steps, *point in plans:
                if point:
                    n_pred += fit_point(point[0], torch, device, amp, precision, params, spec, s, labels, train_ex,
                                        steps, total_steps, splits, mods, env, ev, stop, tok_cache, clock, metrics,
                                        pf, seed, versions)
                    continue
                n_pred += fit_schema(torch, device, amp, precision, params, spec, s, labels, train_ex, steps,
                                     total_steps, splits, mods, env, ev, stop, tok_cache, clock, metrics, pf,
                                     seed, versions, saved)
                orders[s["name"]] = labels
                # What the schema held goes before the next one's model.
                gc.collect()
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                    ev.log("info", "%s done: %.0f MiB of GPU memory still allocated" % (
                        s["name"], torch.cuda.memory_allocated(device) / 2**20))
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
        oom = "%s ran out of memory (%s)" % ("the GPU " + device_name if device.type == "cuda" else "the machine",
                                            str(e).splitlines()[0][:300] if str(e) else type(e).__name__)
    if oom is not None:
        # Outside the handler, so that the traceback's tensors are gone.
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        knobs = "batch_size %d and max_length %d" % (bs, tok_cache.max_length or params["max_length"] or 0)
        if is_builtin(params["model"]):
            knobs += ", buckets %d, embed_dim %d" % (params["buckets"], params["embed_dim"])
        raise TrainerError(EXIT_OUT_OF_MEMORY, "out_of_memory",
                           "%s with %s: lower them (--param batch_size=N, --param max_length=N)" % (oom, knobs))
    metrics["fit_seconds"] = time.time() - start
    metrics["steps_per_s"] = clock["real"] / max(clock["fit_s"], 1e-9)
    metrics["steps"] = clock["real"]
    metrics["examples_per_s"] = clock.get("examples", 0) / max(clock["fit_s"], 1e-9)
    metrics.update(peak_memory(torch, device))
    if clock.get("pred_n"):
        metrics["predict_items_per_s"] = clock["pred_n"] / max(clock["pred_s"], 1e-9)
    ev.result(metrics, orders, "predictions.jsonl", n_pred, precision=precision, device=device_name)


def peak_memory(torch, device):
    """The run's peak memory, in MiB: the process's resident set, and on a
    CUDA device the most its tensors took (allocated) and the caching
    allocator held (reserved)."""
    out = {}
    try:
        import resource
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out["peak_rss_mib"] = rss / 2**20 if sys.platform == "darwin" else rss / 2**10
    except ImportError:
        pass
    if device.type == "cuda":
        out["gpu_peak_allocated_mib"] = torch.cuda.max_memory_allocated(device) / 2**20
        out["gpu_peak_reserved_mib"] = torch.cuda.max_memory_reserved(device) / 2**20
    return out


def curve_plans(spec, plans, bs, params, seed, splits):
    """A curve's plans: for each schema, each draw d of spec.json's
    curve_draws (absent: one) and each point, one fit on the point's items
    in the order of seed + d (curve.subset). A point too small to fit
    fails the run, and so does a bundle without a test split to score the
    points on."""
    points = spec["curve"]
    curve.check_points(points)
    draws = curve.check_draws(spec.get("curve_draws"))
    if not splits.get("test"):
        raise TrainerError(EXIT_BAD_SPEC, "validation_failed", "curve: the bundle has no test split to score the points on")
    out, total = [], 0
    for s, labels, train_ex, _ in plans:
        for d in range(draws):
            for p in points:
                sub = curve.subset(train_ex, curve.draw_seed(seed, d), p)
                if len(sub) < 2 or too_few_labels(s, sub):
                    at = "curve point %s%%" % curve.label(p) + (", draw %d," % d if draws > 1 else "")
                    raise TrainerError(EXIT_BAD_SPEC, "validation_failed",
                                       "schema %s: %s has %d labelled training items: %s needs at least "
                                       "2 items and 2 labels; give later points" % (s["name"], at, len(sub), TRAINER))
                steps = steps_per_epoch(len(sub), params) * epochs_for(params, len(sub))
                out.append((s, labels, sub, steps, (p, d, draws)))
                total += steps
    return out, total


def too_few_labels(s, ex):
    """Whether the examples of a nominal schema have fewer than 2 labels,
    or those of an ordinal one fewer than 2 points."""
    if s["kind"] == "nominal":
        return len({t for _, _, t in ex}) < 2
    if ordinal.is_ordinal(s):
        return len({tuple(t) for _, _, t in ex}) < 2
    return False


def fit_point(point, torch, device, amp, precision, params, spec, s, labels, train_ex, steps, total_steps, splits,
              mods, env, ev, stop, tok_cache, clock, metrics, pf, seed, versions):
    """Fits a schema's model at one point of a curve, as fit_schema fits a
    run's, and writes its predictions of the test split, tagged with the
    point and the draw (curve.TaggedFile); the model is not kept."""
    point, draw, draws = point
    test = splits.get("test", [])
    tagged = curve.TaggedFile(pf, point, len(train_ex), {r["instance_id"] for r in test}, draw)
    scratch = []
    ev.log("info", "curve: %s at %s%% of the train split, %d items%s" % (
        s["name"], curve.label(point), len(train_ex), ", draw %d of %d" % (draw + 1, draws) if draws > 1 else ""))
    fit_schema(torch, device, amp, precision, params, spec, s, labels, train_ex, steps, total_steps,
               {"val": splits.get("val", []), "test": test}, mods, env, ev, stop, tok_cache, clock, metrics, tagged,
               seed, versions, scratch)
    for partial, _ in scratch:
        shutil.rmtree(partial, ignore_errors=True)
    return tagged.written


def fit_schema(torch, device, amp, precision, params, spec, s, labels, train_ex, steps, total_steps, splits,
               mods, env, ev, stop, tok_cache, clock, metrics, pf, seed, versions, saved):
    """Fits one schema's model, saves it under PARTIAL_PREFIX (appending
    the directory and its final name to saved), writes its predictions to
    pf and returns how many."""
    # An ordinal schema's model has a sigmoid output per threshold of its
    # scale, learnt as a multilabel one's (ordinal.py).
    name, multi = s["name"], s["kind"] in ("multilabel", "ordinal")
    outputs = ordinal.thresholds(labels) if ordinal.is_ordinal(s) else labels
    bs, accum = params["batch_size"], params.get("grad_accum", 1)
    epochs = epochs_for(params, len(train_ex))
    if epochs != params["epochs"]:
        ev.log("info", "%s: %d epochs at most: %d items make %d steps an epoch, and the default is enough epochs "
               "for about %d steps, at least %d and at most %d (--param epochs=N sets them)"
               % (name, epochs, len(train_ex), math.ceil(len(train_ex) / bs), AUTO_EPOCHS_STEPS, params["epochs"],
                  AUTO_EPOCHS_MAX))
        params = dict(params, epochs=epochs)
    val_ex = examples(splits.get("val", []), s, labels)
    ev.status("fitting", "fitting %s on %d items" % (name, len(train_ex)))
    # The same seed before each schema: its model does not depend on the
    # schemas before it.
    set_seed(torch, seed)
    loaded = load_model(params, outputs, multi, mods, env, ev, tok_cache)
    ev.log("info", "%s: %s" % (name, loaded.describe))
    model = loaded.model
    if params.get("auto_learning_rate"):
        n_params = sum(p.numel() for p in model.parameters())
        use_lora = loaded.card.get("lora") is not None
        lr = learning_rate_for(use_lora, n_params)
        ev.log("info", "%s: learning rate %g for %s of a model of %.0f million parameters (--param "
               "learning_rate=X sets it)" % (name, lr, "LoRA" if use_lora else "full fine-tuning",
                                              n_params / 1e6))
        params = dict(params, learning_rate=lr)
    if not loaded.placed:
        model.to(device)
    encode, pad_id = loaded.encode, loaded.pad_id
    # Tokenized once, held on the device for every epoch.
    tr_enc = Encoded(torch, device, encode([t for _, t, _ in train_ex]), pad_id)
    va_enc = Encoded(torch, device, encode([t for _, t, _ in val_ex]), pad_id)
    ydt = torch.float if multi else torch.long
    tr_y = torch.tensor([y for _, _, y in train_ex], dtype=ydt).to(device)
    va_y = torch.tensor([y for _, _, y in val_ex], dtype=ydt).to(device) if val_ex else None
    trainable = [p for p in model.parameters() if p.requires_grad]
    # The new classification head learns at its own rate (spec.py).
    head_ids = {id(p) for p in loaded.head}
    head = [p for p in trainable if id(p) in head_ids]
    body = [p for p in trainable if id(p) not in head_ids]
    groups = [{"params": ps, "lr": lr} for ps, lr in ((body, params["learning_rate"]),
                                                      (head, params["head_learning_rate"])) if ps]
    if head:
        ev.log("info", "%s: learning rate %g for the classification head (%d parameters), %g for the other %d "
               "trainable parameters" % (name, params["head_learning_rate"], sum(p.numel() for p in head),
                                         params["learning_rate"], sum(p.numel() for p in body)))
    opt = torch.optim.AdamW(groups, lr=params["learning_rate"], weight_decay=params["weight_decay"])
    sched = linear_schedule(torch, opt, int(params["warmup_ratio"] * steps), steps)
    scaler = grad_scaler(torch) if precision == "fp16" else None
    weights, why = class_weights(params["class_weights"], [y for _, _, y in train_ex], len(outputs), multi)
    if weights is not None:
        ev.log("info", "%s: class weights %s: %s (--param class_weights=none for none)" % (
            name, ", ".join("%s %.2f" % (l, w) for l, w in zip(outputs, weights)), why))
        w = torch.tensor(weights, dtype=torch.float, device=device)
        loss_fn = torch.nn.BCEWithLogitsLoss(pos_weight=w) if multi else torch.nn.CrossEntropyLoss(weight=w)
    else:
        loss_fn = torch.nn.BCEWithLogitsLoss() if multi else torch.nn.CrossEntropyLoss()
    gen = random.Random(seed)
    # An ordinal schema's thresholds are read at 0.5 (ordinal.py).
    threshold = 0.5 if ordinal.is_ordinal(s) else params["threshold"]

    def forward(inp, att):
        if amp is not None:
            with torch.autocast(device_type="cuda", dtype=amp):
                out = model(input_ids=inp, attention_mask=att)
        else:
            out = model(input_ids=inp, attention_mask=att)
        return getattr(out, "logits", out).float()

    def by_length(enc):
        return sorted(range(len(enc)), key=lambda j: enc.lengths[j])

    def evaluate(enc, y):
        model.eval()
        tot, n, correct = 0.0, 0, 0
        with torch.no_grad():
            for idx, sel, inp, att in batches(enc, by_length(enc), bs):
                stop.check()
                logits = forward(inp, att)
                yy = y[sel]
                tot += loss_fn(logits, yy).item() * len(idx)
                n += len(idx)
                if multi:
                    # The threshold of the predictions.
                    correct += int(((torch.sigmoid(logits) >= threshold).float() == yy).all(dim=1).sum().item())
                else:
                    correct += int((logits.argmax(dim=1) == yy).sum().item())
        model.train()
        return tot / max(n, 1), correct / max(n, 1)

    best = BestState(model, torch, device)
    best_loss, bad_epochs, best_epoch, kept = float("inf"), 0, 0, False
    per_epoch = steps_per_epoch(len(tr_enc), params)
    for epoch in range(1, params["epochs"] + 1):
        model.train()
        tot, n = 0.0, 0
        t_epoch = time.time()
        n_batches = math.ceil(len(tr_enc) / bs)
        for b, (idx, sel, inp, att) in enumerate(batches(tr_enc, grouped_order(tr_enc.lengths, bs, gen), bs)):
            stop.check()
            logits = forward(inp, att)
            loss = loss_fn(logits, tr_y[sel])
            # grad_accum batches make a step (the last ones of an epoch
            # may make a shorter one); each batch's loss is weighed by its
            # share of the step's items.
            first = b % accum == 0
            step_end = min(n_batches, b - b % accum + accum)
            share = len(idx) / float(min(len(tr_enc), step_end * bs) - (b - b % accum) * bs)
            if first:
                opt.zero_grad(set_to_none=True)
            scaled = loss * share if accum > 1 else loss
            if scaler is not None:
                scaler.scale(scaled).backward()
            else:
                scaled.backward()
            if b + 1 < step_end:
                tot = tot + loss.detach() * len(idx)
                n += len(idx)
                clock["examples"] = clock.get("examples", 0) + len(idx)
                continue
            if scaler is not None:
                if params["max_grad_norm"] > 0:
                    scaler.unscale_(opt)
                    torch.nn.utils.clip_grad_norm_(trainable, params["max_grad_norm"])
                scaler.step(opt)
                scaler.update()
            else:
                if params["max_grad_norm"] > 0:
                    torch.nn.utils.clip_grad_norm_(trainable, params["max_grad_norm"])
                opt.step()
            sched.step()
            # Summed on the device: no wait for the device each step.
            tot = tot + loss.detach() * len(idx)
            n += len(idx)
            clock["done"] += 1
            clock["real"] += 1
            clock["examples"] = clock.get("examples", 0) + len(idx)
            now = time.time()
            if now - clock["last"] >= 0.2 or clock["done"] == total_steps:
                clock["last"] = now
                rate = clock["done"] / max(now - clock["t0"], 1e-9)
                ev.progress("fit", clock["done"], total_steps, (total_steps - clock["done"]) / rate)
        clock["fit_s"] += time.time() - t_epoch
        ev.metric("train", name + "/loss", float(tot) / max(n, 1), epoch)
        if not val_ex:
            continue
        vloss, vacc = evaluate(va_enc, va_y)
        ev.metric("val", name + "/loss", vloss, epoch)
        ev.metric("val", name + "/accuracy", vacc, epoch)
        if vloss < best_loss:
            best_loss, best_epoch, bad_epochs = vloss, epoch, 0
            if epoch < params["epochs"]:
                best.keep()
                kept = True
            else:
                kept = False  # the model as it is holds the best epoch
        else:
            bad_epochs += 1
            if params["patience"] >= 0 and bad_epochs > params["patience"]:
                ev.log("info", "%s: val loss has not improved for %d epochs: stopping after epoch %d"
                       % (name, bad_epochs, epoch))
                skipped = (params["epochs"] - epoch) * per_epoch
                clock["done"] += skipped
                ev.progress("fit", clock["done"], total_steps)
                break
    if kept and best_epoch != epoch:
        best.restore()
    if best_epoch:
        metrics[name + "/best_epoch"] = best_epoch
    vacc = None
    if val_ex:
        vloss, vacc = evaluate(va_enc, va_y)
        metrics[name + "/val_loss"] = vloss
        metrics[name + "/val_accuracy"] = vacc
    del best, opt, sched, scaler, tr_enc, va_enc, tr_y, va_y

    model.eval()
    card = model_card(spec, s, params, labels, loaded, {
        "precision": precision, "seed": seed, "train_items": len(train_ex), "val_items": len(val_ex),
        "best_epoch": best_epoch or None, "val_accuracy": vacc, "packages": versions}, outputs=outputs)
    saved.append(save_model(spec["workdir"], loaded, card))

    # (Not into quantized weights, where merging rounds: predicted as saved.)
    if loaded.card.get("lora") and not params["merge"] and hasattr(model, "merge_adapter") and \
            loaded.card.get("quantize", "none") == "none":
        # Saved as an adapter; predicted with the adapter merged into the
        # weights it adapts: one matrix product a layer, not three.
        try:
            model.merge_adapter()
        except Exception as e:
            ev.log("warning", "%s: predicting with the adapter unmerged: merging it failed: %s" % (name, e))
    ev.status("predicting", "predicting %s" % name)
    return predict(torch, device, forward, loaded, splits, s, labels, params, stop, pf, clock)


# The rows of a split read, tokenized and predicted at a time: the memory
# of prediction is a chunk's, whatever the size of the split.
PREDICT_CHUNK = 4096

# Prediction takes PREDICT_BATCH_FACTOR times batch_size rows at a time.
# Under inference mode a layer's activations are dropped once the next
# layer has them, where a training step keeps every layer's for the
# backward pass, so four times the rows hold less than one training batch
# for a model of more than four layers; on a CPU the larger matrix
# products take much less time a row (all-MiniLM-L6-v2, 128 tokens, 2
# threads: about 1.7 times fewer CPU seconds at 64 rows than at 16), and
# the rows are sorted by length, so that a batch pads little.
PREDICT_BATCH_FACTOR = 4


@contextlib.contextmanager
def flush_denormal(torch, device):
    """Within it, on a CPU, floats too small for a normal float32 (below
    about 1.2e-38) are read and made as zero (torch.set_flush_denormal);
    outside it, as before. It yields whether they are: never off the CPU,
    nor where the CPU cannot. A CPU takes many times longer over such
    numbers, and a model fine-tuned whole can carry them:
    scripts/bench-hf's whole-model run predicted 21.1 items a second
    without, 31.7 with (all-MiniLM-L6-v2, 2 threads). No probability moves
    by as much as float32 rounding."""
    on = str(device) == "cpu" and torch.set_flush_denormal(True)
    try:
        yield on
    finally:
        if on:
            torch.set_flush_denormal(False)


def predict(torch, device, forward, loaded, splits, s, labels, params, stop, pf, clock):
    """Writes to pf the predictions of forward for schema s on every split
    but train (prediction_row), and returns how many. A split is read a
    chunk (PREDICT_CHUNK rows) at a time, which is sorted by length and
    predicted in batches of PREDICT_BATCH_FACTOR * batch_size under
    inference mode; its lines
    are written in that order (predictions.jsonl is keyed by instance_id,
    in no order). Adds the items and seconds to clock's pred_n and
    pred_s."""
    name, multi, threshold = s["name"], s["kind"] == "multilabel", params["threshold"]
    bs = PREDICT_BATCH_FACTOR * params["batch_size"]
    ordered = ordinal.is_ordinal(s)
    n_pred = 0
    t0 = time.time()
    for split in sorted(splits):
        if split == "train":
            continue
        for rows in chunks(splits[split], PREDICT_CHUNK):
            ids = loaded.encode([r["text"] for r in rows])
            order = sorted(range(len(ids)), key=lambda j: len(ids[j]))
            enc = Encoded(torch, device, [ids[j] for j in order], loaded.pad_id)
            del ids
            with torch.inference_mode(), flush_denormal(torch, device):
                for start in range(0, len(order), bs):
                    stop.check()
                    inp, att = enc.pieces(start, start + bs)
                    # Probabilities in float64 on the host, as the rows'
                    # confidences are.
                    logits = forward(inp, att).cpu().double()
                    probs = (torch.sigmoid(logits) if multi or ordered else torch.softmax(logits, dim=-1)).tolist()
                    for j, p in zip(order[start:start + bs], probs):
                        if ordered:
                            row = ordinal.prediction_row(rows[j]["instance_id"], name, p, labels)
                        else:
                            row = prediction_row(rows[j]["instance_id"], name, p, labels, multi, threshold)
                        pf.write(json.dumps(row, separators=(",", ":"), ensure_ascii=False) + "\n")
            n_pred += len(rows)
            del enc
    clock["pred_n"] = clock.get("pred_n", 0) + n_pred
    clock["pred_s"] = clock.get("pred_s", 0.0) + time.time() - t0
    return n_pred
