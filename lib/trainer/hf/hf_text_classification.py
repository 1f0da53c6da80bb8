#!/usr/bin/env python3
"""The hf-text-classification trainer of potato-training.

Fine-tunes a transformers sequence classifier, with LoRA through peft by
default, on a run's bundle, or trains the built-in hashed n-gram model
(model=builtin:ngram), which needs torch alone; and speaks the v1 event
protocol of potato-events(5) on standard output:

    python3 hf_text_classification.py --spec spec.json

potato-agent(1) documents its parameters, outputs and exit codes.

The file has three parts: plain functions that need no torch (the spec,
the bundle, the events, the prediction rows, the fallback tokenizer, the
device and precision choice), importable with the standard library alone;
the model loaders (load_model: the built-in model with torch, a
transformers model with transformers and, for LoRA, peft); and the fit and
predict loop (train), which needs torch alone. Python 3.8 or newer; torch
1.13 or newer.
"""

import argparse
import gc
import importlib
import importlib.metadata
import importlib.util
import json
import math
import os
import random
import re
import shutil
import signal
import socket
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
# model=builtin:NAME selects a model of this file, which needs torch alone.
BUILTIN_PREFIX = "builtin:"
BUILTIN_MODELS = ("ngram",)
MODEL_CARD_FORMAT = "potato-model-card"

EXIT_FINISHED = 0
EXIT_UNEXPECTED = 1
EXIT_BAD_SPEC = 2
EXIT_MISSING_DEPENDENCY = 3
EXIT_CANCELLED = 4
EXIT_OUT_OF_MEMORY = 5
# A model that is neither a directory nor in the cache, and cannot be
# downloaded, is a missing dependency of the run (exit 3).
EXIT_MODEL_UNAVAILABLE = EXIT_MISSING_DEPENDENCY

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

    def result(self, metrics, label_order, predictions_file, n_predictions, **extra):
        self.emit("result", status="success", model_version=MODEL_VERSION, metrics=metrics,
                  label_order=label_order, predictions_file=predictions_file,
                  n_predictions=n_predictions, **extra)

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
    "merge": ("bool", False),
    "lora_r": ("int", 8),
    "lora_alpha": ("int", 16),
    "lora_dropout": ("float", 0.1),
    "target_modules": ("list", None),
    "epochs": ("int", None),  # 3; 8 for builtin:ngram
    "batch_size": ("int", None),  # 16; 32 for builtin:ngram
    "learning_rate": ("float", None),  # 2e-4 with LoRA, 2e-5 without, 0.01 for builtin:ngram
    "weight_decay": ("float", 0.01),
    "warmup_ratio": ("float", 0.06),
    "max_length": ("int", 128),
    "patience": ("int", 1),
    "precision": ("str", "auto"),
    "threshold": ("float", 0.5),
    "max_grad_norm": ("float", 1.0),
    # builtin:ngram
    "buckets": ("int", 1 << 16),
    "embed_dim": ("int", 32),
    "word_ngrams": ("int", 2),
    "char_ngrams": ("int", 0),
}


def is_builtin(model):
    return model.startswith(BUILTIN_PREFIX)


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
    builtin = is_builtin(out["model"])
    if builtin and out["model"][len(BUILTIN_PREFIX):] not in BUILTIN_MODELS:
        raise _bad_param("model", raw.get("model"), "a directory, a model name or one of "
                         + ", ".join(BUILTIN_PREFIX + m for m in BUILTIN_MODELS))
    if out["epochs"] is None:
        out["epochs"] = 8 if builtin else 3
    if out["batch_size"] is None:
        out["batch_size"] = 32 if builtin else 16
    for key in ("epochs", "batch_size", "max_length", "lora_r", "lora_alpha", "embed_dim", "word_ngrams"):
        if out[key] < 1:
            raise _bad_param(key, raw.get(key), "1 or more")
    if out["buckets"] < 16:
        raise _bad_param("buckets", raw.get("buckets"), "16 or more")
    if out["char_ngrams"] < 0:
        raise _bad_param("char_ngrams", raw.get("char_ngrams"), "0 (none) or more")
    if out["max_grad_norm"] < 0:
        raise _bad_param("max_grad_norm", raw.get("max_grad_norm"), "0 (no clipping) or more")
    if not 0 <= out["lora_dropout"] < 1:
        raise _bad_param("lora_dropout", raw.get("lora_dropout"), "at least 0 and below 1")
    if out["learning_rate"] is None:
        out["learning_rate"] = 0.01 if builtin else (2e-4 if out["lora"] else 2e-5)
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


# ---------------------------------------------------------------- precision


PRECISIONS = ("fp32", "bf16", "fp16")


def choose_precision(requested, device_type, capability):
    """The precision to train in, and a warning ("" when none).

    bf16 only on a CUDA device of compute capability 8.0 or more (torch's
    is_bf16_supported() also says yes where bf16 is only emulated, slowly);
    fp16 with a gradient scaler on an older GPU; fp32 elsewhere.
    capability is (major, minor), None off CUDA."""
    if device_type != "cuda":
        if requested in ("bf16", "fp16"):
            return "fp32", "precision %s needs a CUDA GPU: training in fp32 on the %s" % (requested, device_type)
        return "fp32", ""
    bf16_ok = tuple(capability or (0, 0)) >= (8, 0)
    if requested in ("fp32", "fp16"):
        return requested, ""
    if requested == "bf16" and not bf16_ok:
        return "fp16", ("precision bf16 needs compute capability 8.0 or more, this GPU has %d.%d: training in fp16"
                        % tuple(capability or (0, 0)))
    return ("bf16" if bf16_ok else "fp16"), ""


def grad_scaler(torch):
    """fp16's gradient scaler: torch.amp.GradScaler("cuda") where torch has
    it (2.3 and newer), torch.cuda.amp.GradScaler before."""
    amp = getattr(torch, "amp", None)
    if amp is not None and hasattr(amp, "GradScaler"):
        return amp.GradScaler("cuda")
    return torch.cuda.amp.GradScaler()


def set_seed(torch, seed):
    """Seeds every generator training draws from."""
    random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed % (1 << 32))


# ---------------------------------------------------------------- dependencies


def needed_packages(params):
    """The import names the run needs: torch alone for a built-in model,
    transformers too for another, and peft for LoRA, with jinja2, without
    which peft's save_pretrained fails as it writes the adapter's model
    card: after the whole fit, were it not checked first."""
    if is_builtin(params["model"]):
        return ("torch",)
    return ("torch", "transformers", "peft", "jinja2") if params["lora"] else ("torch", "transformers")


# The oldest versions supported: the oldest stack the tests run
# (requirements/hf-debian.txt, Debian 12's torch). Transformers from 4.50
# on import torch.distributed.tensor, which torch 2 brought.
MIN_VERSIONS = (("torch", (1, 13)), ("transformers", (4, 49)), ("peft", (0, 21)))
TRANSFORMERS_NEEDS_TORCH2 = (4, 50)
SUPPORTED = ("torch 1.13 or newer, transformers 4.49 or newer (4.50 and later need torch 2) "
             "and, for LoRA, peft 0.21 or newer")


def _release(v):
    """The first two numbers of a version string, (0, 0) when none."""
    nums = re.findall(r"\d+", v or "")[:2]
    return tuple(int(x) for x in nums) + (0,) * (2 - len(nums))


def check_versions(names, lookup=importlib.metadata.version):
    """Refuses, before anything is imported, packages outside the supported
    range (missing_dependency, naming the versions found and needed). A
    package that is not installed is left to import_packages."""
    found = {}
    for name in names:
        try:
            found[name] = lookup(name)
        except Exception:  # noqa: BLE001 - not installed, or no metadata
            continue
    wrong = []
    for name, least in MIN_VERSIONS:
        if name in found and _release(found[name]) < least:
            wrong.append("%s %s is older than %d.%d" % (name, found[name], least[0], least[1]))
    if ("transformers" in found and "torch" in found and _release(found["transformers"]) >= TRANSFORMERS_NEEDS_TORCH2
            and _release(found["torch"]) < (2, 0)):
        wrong.append("transformers %s needs torch 2.0 or newer, and torch is %s" % (found["transformers"], found["torch"]))
    if wrong:
        have = ", ".join("%s %s" % (n, found[n]) for n in names if n in found)
        raise TrainerError(EXIT_MISSING_DEPENDENCY, "missing_dependency",
                           "%s cannot run on this interpreter's packages (%s): %s; it needs %s"
                           % (TRAINER, have, "; ".join(wrong), SUPPORTED),
                           "pip install --upgrade %s" % " ".join(n for n in names if n in found))


def missing_packages(find=importlib.util.find_spec, names=PACKAGES):
    """The import names of names that this interpreter cannot find."""
    out = []
    for name in names:
        try:
            if find(name) is None:
                out.append(name)
        except (ImportError, ValueError):
            out.append(name)
    return out


def import_error(missing):
    """SPEC F4, worded as lib/probe's ImportError: (message, install hint)."""
    return IMPORT_ERROR % TRAINER, (INSTALL_HINT % " ".join(missing) if missing else "")


def import_packages(names=PACKAGES, why=""):
    """The modules of names, in order, or a missing_dependency error (F4)
    whose detail names the packages missing and what needs them."""
    missing, detail = missing_packages(names=names), ""
    if not missing:
        try:
            return tuple(importlib.import_module(n) for n in names)
        except ImportError as e:
            top = (getattr(e, "name", None) or "").split(".")[0]
            missing = [top if top in names else names[0]]
            detail = "importing %s failed: %s" % (missing[0], e)
    else:
        detail = "this interpreter (%s) has no %s" % (sys.executable, ", ".join(missing))
    if why:
        detail += " (%s)" % why
    msg, hint = import_error(missing)
    e = TrainerError(EXIT_MISSING_DEPENDENCY, "missing_dependency", msg, hint)
    e.detail = detail
    raise e


# ---------------------------------------------------------------- offline models


def hub_cache_dir(env):
    """Where transformers looks for downloaded models."""
    if env.get("HF_HUB_CACHE"):
        return env["HF_HUB_CACHE"]
    home = env.get("HF_HOME") or os.path.join(env.get("XDG_CACHE_HOME") or os.path.join(
        os.path.expanduser("~"), ".cache"), "huggingface")
    return os.path.join(home, "hub")


def is_offline(env):
    return any((env.get(k) or "").strip().lower() in ("1", "true", "yes", "on")
               for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def looks_like_path(name):
    """A name that can only be a directory: a hub name is NAME or ORG/NAME."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or "\\" in name


def hub_reachable(env, timeout=5.0):
    """(True, "") when the model hub's endpoint answers a TCP connection
    within timeout, else (False, why). Behind a proxy it is not judged."""
    if any(env.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True, ""
    url = env.get("HF_ENDPOINT")
    if not url:
        try:
            from huggingface_hub import constants  # noqa: PLC0415
            url = constants.ENDPOINT
        except Exception:  # noqa: BLE001 - no endpoint known: let the library try
            return True, ""
    m = re.match(r"^(https?)://([^/:]+)(?::(\d+))?", url or "")
    if not m:
        return True, ""
    port = int(m.group(3) or (443 if m.group(1) == "https" else 80))
    try:
        socket.create_connection((m.group(2), port), timeout=timeout).close()
        return True, ""
    except OSError as e:
        return False, "%s cannot be reached: %s" % (url, e)


def model_unavailable(name, why, env):
    cache = hub_cache_dir(env)
    return TrainerError(
        EXIT_MODEL_UNAVAILABLE, "model_unavailable",
        "model %s is not in %s and cannot be downloaded (%s): download it on a machine with network "
        "into that directory (HF_HOME=%s), or pass --param model=DIRECTORY holding the model saved "
        "with save_pretrained" % (name, cache, why, os.path.dirname(cache)))


def pretrained(fn, name, env, reachable=hub_reachable, **kw):
    """fn(name, **kw) for a transformers from_pretrained: a directory as it
    is; a hub name from the cache first, downloaded only when the cache has
    it not, the hub is not switched off (HF_HUB_OFFLINE) and reachable. A
    model that cannot be had fails at once with model_unavailable."""
    if os.path.isdir(name):
        try:
            return fn(name, **kw)
        except TrainerError:
            raise
        except Exception as e:  # noqa: BLE001 - a damaged file, whatever the library raises
            if is_oom(sys.modules.get("torch"), e):
                raise
            raise TrainerError(EXIT_MODEL_UNAVAILABLE, "model_unavailable",
                               "model %s cannot be read (%s: %s): a file of it is damaged or incomplete; "
                               "save or copy the model there again" % (name, type(e).__name__,
                                                                        (str(e).splitlines() or [""])[0][:300]))
    if looks_like_path(name):
        raise TrainerError(EXIT_MODEL_UNAVAILABLE, "model_unavailable",
                           "model %s is not a directory: pass --param model= a directory holding a model "
                           "saved with save_pretrained, or a model name" % name)
    try:
        return fn(name, local_files_only=True, **kw)
    except (OSError, ValueError) as e:
        cached = e
    if is_offline(env):
        raise model_unavailable(name, "HF_HUB_OFFLINE is set", env)
    ok, why = reachable(env)
    if not ok:
        raise model_unavailable(name, why, env)
    try:
        return fn(name, **kw)
    except (OSError, ValueError) as e:
        raise model_unavailable(name, "%s; from the cache: %s" % (str(e).splitlines()[0] if str(e) else e,
                                                                    str(cached).splitlines()[0]), env)


# ---------------------------------------------------------------- the built-in model


class NgramFeaturizer:
    """builtin:ngram's tokenizer: the lowercased words and punctuation of a
    text (the first max_length of them), their word n-grams up to
    word_ngrams and, with char_ngrams, the character n-grams of each word
    with its boundaries; each hashed (CRC-32) into 1..buckets-1. 0 is
    padding; a text with no feature gets the one id 1."""

    WORD = re.compile(r"\w+|[^\w\s]", re.UNICODE)

    def __init__(self, buckets, word_ngrams=2, char_ngrams=0, max_length=128):
        self.buckets, self.word_ngrams, self.char_ngrams = buckets, word_ngrams, char_ngrams
        self.max_length = max_length

    def _id(self, s):
        return 2 + zlib.crc32(s.encode("utf-8")) % (self.buckets - 2)

    def encode(self, text):
        words = self.WORD.findall((text or "").lower())[:self.max_length]
        ids = []
        for n in range(1, self.word_ngrams + 1):
            for i in range(len(words) - n + 1):
                ids.append(self._id("w%d:" % n + " ".join(words[i:i + n])))
        if self.char_ngrams:
            k = self.char_ngrams
            for w in words:
                b = "<" + w + ">"
                for i in range(max(1, len(b) - k + 1)):
                    ids.append(self._id("c:" + b[i:i + k]))
        return ids or [1]

    def settings(self):
        return {"format": "potato-ngram-features", "v": 1, "buckets": self.buckets, "lowercase": True,
                "pattern": self.WORD.pattern, "hash": "crc32", "offset": 2, "pad_id": 0, "empty_id": 1,
                "word_ngrams": self.word_ngrams, "char_ngrams": self.char_ngrams,
                "max_length": self.max_length}


def ngram_model_class(torch):
    nn = torch.nn

    class NgramClassifier(nn.Module):
        """The mean of the hashed n-grams' embeddings, then a linear head."""

        def __init__(self, buckets, dim, n_labels):
            nn.Module.__init__(self)
            self.embed = nn.Embedding(buckets, dim, padding_idx=0)
            nn.init.uniform_(self.embed.weight, -0.1, 0.1)
            with torch.no_grad():
                self.embed.weight[0].zero_()
            self.dropout = nn.Dropout(0.1)
            self.classifier = nn.Linear(dim, n_labels)

        def forward(self, input_ids, attention_mask):
            m = attention_mask.unsqueeze(-1).to(self.embed.weight.dtype)
            pooled = (self.embed(input_ids) * m).sum(1) / m.sum(1).clamp(min=1.0)
            return self.classifier(self.dropout(pooled))

    return NgramClassifier


class Loaded:
    """A model ready to train: the module, how to encode texts, the padding
    id, how to save it, and what it is, for the log and the model card."""

    def __init__(self, model, encode, pad_id, save, card, describe):
        self.model, self.encode, self.pad_id, self.save = model, encode, pad_id, save
        self.card, self.describe = card, describe


def load_builtin(params, labels, multi, torch):
    feats = NgramFeaturizer(params["buckets"], params["word_ngrams"], params["char_ngrams"], params["max_length"])
    model = ngram_model_class(torch)(params["buckets"], params["embed_dim"], len(labels))

    def save(out_dir):
        os.makedirs(out_dir, exist_ok=True)
        torch.save(model.state_dict(), os.path.join(out_dir, "model.pt"))
        _write_json(os.path.join(out_dir, "ngram.json"), dict(
            feats.settings(), embed_dim=params["embed_dim"], num_labels=len(labels),
            id2label={str(i): l for i, l in enumerate(labels)}, label2id={l: i for i, l in enumerate(labels)},
            problem_type="multi_label_classification" if multi else "single_label_classification"))
        return ["model.pt", "ngram.json"]

    n = sum(p.numel() for p in model.parameters())
    return Loaded(model, lambda texts: [feats.encode(t) for t in texts], 0, save,
                  {"base_model": params["model"], "lora": None, "max_length": params["max_length"]},
                  "builtin:ngram: %d buckets of %d dimensions, word n-grams to %d%s, %d parameters" % (
                      params["buckets"], params["embed_dim"], params["word_ngrams"],
                      ", char %d-grams" % params["char_ngrams"] if params["char_ngrams"] else "", n))


def _version(mod):
    nums = re.findall(r"\d+", getattr(mod, "__version__", "0") or "0")[:2]
    return tuple(int(x) for x in nums) + (0,) * (2 - len(nums))


def _dtype_kw(transformers, torch):
    """Weights in fp32 for training: transformers 5 loads dtype="auto" (the
    checkpoint's fp16 or bf16) by default; before 4.56 the key is torch_dtype."""
    return {"dtype": torch.float32} if _version(transformers) >= (4, 56) else {"torch_dtype": torch.float32}


def clamp_max_length(requested, config, tokenizer_max=None):
    """max_length, at most what the model's position embeddings hold
    (RoBERTa-style models lose two positions to their padding offset) and
    what the tokenizer says: (length, why it was lowered or "")."""
    limit, why = None, ""
    mpe = getattr(config, "max_position_embeddings", None)
    if isinstance(mpe, int) and mpe > 0:
        offset = 2 if getattr(config, "model_type", "") in ("roberta", "xlm-roberta", "camembert") else 0
        limit, why = mpe - offset, "max_position_embeddings %d" % mpe
    if isinstance(tokenizer_max, int) and 0 < tokenizer_max < 1000000 and (limit is None or tokenizer_max < limit):
        limit, why = tokenizer_max, "the tokenizer's model_max_length %d" % tokenizer_max
    if limit is not None and requested > limit:
        return limit, "max_length %d is more than the model's %s: using %d" % (requested, why, limit)
    return requested, ""


def _conv1d_class(transformers):
    try:
        return importlib.import_module(transformers.__name__ + ".pytorch_utils").Conv1D
    except (ImportError, AttributeError):
        return None


def lora_targets(model, config, explicit, torch, conv1d=None):
    """LoRA's target modules and why: the param, else the table when the
    model has those modules, else its linear (or GPT-2 Conv1D) layers named
    like attention projections, else every such layer but the head. Never
    empty: a model with none is refused."""
    kinds = (torch.nn.Linear,) + ((conv1d,) if conv1d is not None else ())
    every, layers, is_conv = set(), set(), set()
    for name, mod in model.named_modules():
        parts = name.split(".")
        every.add(parts[-1])
        if not isinstance(mod, kinds) or any(h in parts for h in HEAD_NAMES):
            continue
        layers.add(parts[-1])
        if conv1d is not None and isinstance(mod, conv1d):
            is_conv.add(parts[-1])
    mt = getattr(config, "model_type", "") or "?"
    if explicit:
        absent = [t for t in explicit if t not in every]
        if absent:
            raise TrainerError(EXIT_BAD_SPEC, "bad_spec",
                               "param target_modules: %s has no module named %s; its linear layers are %s"
                               % (mt, ", ".join(absent), ", ".join(sorted(layers)) or "none"))
        targets, why = list(explicit), "param"
    elif mt in LORA_TARGETS and all(t in layers for t in LORA_TARGETS[mt]):
        targets, why = list(LORA_TARGETS[mt]), "model type " + mt
    elif layers & set(LORA_FALLBACK_NAMES):
        targets, why = sorted(layers & set(LORA_FALLBACK_NAMES)), "attention projections of model type " + mt
    else:
        targets, why = sorted(layers), "every linear layer of model type " + mt
    if not targets:
        raise TrainerError(EXIT_BAD_SPEC, "bad_spec",
                           "LoRA: model type %s has no linear layer to adapt: pass --param target_modules=NAMES "
                           "or --param lora=false" % mt)
    return targets, why, bool(is_conv & set(targets))


class _TokenizerCache:
    """The run's transformers tokenizer (or hashing fallback), loaded once."""
    value = None


def load_transformers(params, labels, multi, torch, transformers, peft, env, ev, cache):
    src = params["model"]
    local = os.path.isdir(src)
    kw = {"num_labels": len(labels),
          "id2label": {i: l for i, l in enumerate(labels)},
          "label2id": {l: i for i, l in enumerate(labels)},
          "problem_type": "multi_label_classification" if multi else "single_label_classification"}
    config = pretrained(transformers.AutoConfig.from_pretrained, src, env, **kw)
    random_init = local and not has_weights(src)

    if cache.value is None:
        if local and not has_tokenizer(src):
            if not random_init:
                raise TrainerError(EXIT_MODEL_UNAVAILABLE, "model_unavailable",
                                   "%s holds weights but no tokenizer (none of %s): save the model's tokenizer "
                                   "there with save_pretrained; a pretrained model cannot be trained on other "
                                   "tokens" % (src, ", ".join(TOKENIZER_FILES)))
            pad = config.pad_token_id if getattr(config, "pad_token_id", None) is not None else 0
            unk, cls, sep = [i for i in range(5) if i != pad][:3]
            tok = HashTokenizer(config.vocab_size, pad_id=pad, unk_id=unk, cls_id=cls, sep_id=sep)
            max_len, why = clamp_max_length(params["max_length"], config)
            ev.log("info", "%s has no tokenizer and no weights: using the hashing tokenizer over its %d-word "
                   "vocabulary" % (src, config.vocab_size))

            def encode(texts):
                return [tok.encode(t, max_len) for t in texts]

            def save_tok(d):
                _write_json(os.path.join(d, "hash-tokenizer.json"), tok.settings())
            cache.value = (encode, tok.pad_id, save_tok, max_len, why, "hash-tokenizer.json")
        else:
            hf_tok = pretrained(transformers.AutoTokenizer.from_pretrained, src, env)
            if hf_tok.pad_token is None:
                hf_tok.pad_token = hf_tok.eos_token or hf_tok.unk_token
                if hf_tok.pad_token is not None:
                    ev.log("info", "the tokenizer of %s has no pad token: batches are padded with %s, which the "
                           "attention mask hides" % (src, hf_tok.pad_token))
            if hf_tok.pad_token is None:
                raise TrainerError(EXIT_BAD_SPEC, "bad_spec", "the tokenizer of %s has no pad, eos or unk token to "
                                   "pad batches with" % src)
            max_len, why = clamp_max_length(params["max_length"], config, getattr(hf_tok, "model_max_length", None))
            fill = hf_tok.unk_token_id if getattr(hf_tok, "unk_token_id", None) is not None else hf_tok.pad_token_id

            def encode(texts):
                texts = [t if t else " " for t in texts]
                if not texts:
                    return []
                ids = hf_tok(texts, truncation=True, max_length=max_len)["input_ids"]
                return [list(x) or [fill] for x in ids]
            cache.value = (encode, hf_tok.pad_token_id, hf_tok.save_pretrained, max_len, why, "the model's")
        if cache.value[4]:
            ev.log("warning", cache.value[4])
    encode, pad_id, save_tok, max_len, _, tok_kind = cache.value
    if getattr(config, "pad_token_id", None) is None:
        config.pad_token_id = pad_id

    if random_init:
        model = transformers.AutoModelForSequenceClassification.from_config(config)
        ev.log("info", "%s holds no weights: built from its config with random weights" % src)
    else:
        model = pretrained(transformers.AutoModelForSequenceClassification.from_pretrained, src, env,
                           config=config, ignore_mismatched_sizes=True, **_dtype_kw(transformers, torch))
    model.float()
    lora = None
    if params["lora"]:
        targets, why, conv = lora_targets(model, config, params["target_modules"], torch, _conv1d_class(transformers))
        # The head is new: train all of it (DistilBERT's has two layers,
        # and peft's default saves only "classifier").
        head = [n for n, _ in model.named_children() if n in HEAD_NAMES]
        lkw = dict(task_type=peft.TaskType.SEQ_CLS, r=params["lora_r"], lora_alpha=params["lora_alpha"],
                   lora_dropout=params["lora_dropout"], target_modules=targets, modules_to_save=head or None)
        if conv:
            lkw["fan_in_fan_out"] = True
        model = peft.get_peft_model(model, peft.LoraConfig(**lkw))
        lora = {"r": params["lora_r"], "alpha": params["lora_alpha"], "dropout": params["lora_dropout"],
                "target_modules": targets, "modules_to_save": head, "why": why}
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)

    def save(out_dir):
        os.makedirs(out_dir, exist_ok=True)
        if lora is None:
            model.save_pretrained(out_dir)
        elif params["merge"]:
            # The adapter first, then the base with the adapter merged in:
            # the directory itself loads with from_pretrained alone.
            model.save_pretrained(os.path.join(out_dir, "adapter"))
            config.save_pretrained(os.path.join(out_dir, "adapter"))
            merged = model.merge_and_unload()
            merged.save_pretrained(out_dir)
        else:
            model.save_pretrained(out_dir)
            config.save_pretrained(out_dir)
        save_tok(out_dir)
        if lora is not None and params["merge"]:
            save_tok(os.path.join(out_dir, "adapter"))
        return []

    what = "LoRA on %s (%s)" % (",".join(lora["target_modules"]), lora["why"]) if lora else "full fine-tuning"
    return Loaded(model, encode, pad_id, save,
                  {"base_model": src, "lora": lora, "max_length": max_len, "tokenizer": tok_kind},
                  "%s: %s, %d trainable parameters" % (src, what, n_train))


def load_model(params, labels, multi, mods, env, ev, cache):
    """The model of params["model"] for one schema (Loaded)."""
    if is_builtin(params["model"]):
        return load_builtin(params, labels, multi, mods["torch"])
    return load_transformers(params, labels, multi, mods["torch"], mods["transformers"], mods.get("peft"),
                             env, ev, cache)


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
    oom = getattr(torch.cuda, "OutOfMemoryError", None) if torch is not None else None
    if oom is not None and isinstance(e, oom):
        return True
    if isinstance(e, MemoryError):
        return True
    text = str(e).lower()
    return isinstance(e, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)


def _safe(name):
    return re.sub(r"[/\\\x00]", "_", name) or "_"


# A schema's model is saved under this prefix in workdir, and renamed to
# model-SCHEMA once every schema's model and predictions are written: a run
# that fails or is cancelled leaves no partial model in artifacts/.
PARTIAL_PREFIX = ".partial-"


def remove_partial(workdir):
    """Removes what a run that did not finish saved in workdir."""
    try:
        names = os.listdir(workdir)
    except OSError:
        return
    for n in names:
        if n.startswith(PARTIAL_PREFIX):
            shutil.rmtree(os.path.join(workdir, n), ignore_errors=True)


def _files_under(root, rel_base):
    out = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(d, f)
            out.append((os.path.relpath(p, rel_base), os.path.getsize(p)))
    return out


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


def batches(torch, device, ids_list, order, bs, pad_id):
    for i in range(0, len(order), bs):
        idx = order[i:i + bs]
        width = max(1, max(len(ids_list[j]) for j in idx))
        inp = torch.full((len(idx), width), pad_id, dtype=torch.long)
        att = torch.zeros((len(idx), width), dtype=torch.long)
        for r, j in enumerate(idx):
            seq = ids_list[j] or [pad_id]
            inp[r, :len(seq)] = torch.tensor(seq, dtype=torch.long)
            att[r, :len(seq)] = 1
        yield idx, inp.to(device), att.to(device)


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
        if len(train_ex) < 2 or (s["kind"] == "nominal" and len({t for _, _, t in train_ex}) < 2):
            raise TrainerError(EXIT_BAD_SPEC, "validation_failed",
                               "schema %s has %d labelled training items: %s needs at least 2 items and 2 labels"
                               % (s["name"], len(train_ex), TRAINER))
        steps = math.ceil(len(train_ex) / bs) * params["epochs"]
        plans.append((s, labels, train_ex, steps))
        total_steps += steps

    pred_path = os.path.join(workdir, "predictions.jsonl")
    tmp_pred = pred_path + ".tmp"
    metrics, orders, n_pred = {}, {}, 0
    clock = {"done": 0, "real": 0, "fit_s": 0.0, "last": 0.0, "t0": time.time()}
    tok_cache = _TokenizerCache()
    start = time.time()
    oom = None
    saved = []  # (partial, final) directories of the models
    try:
        with open(tmp_pred, "w", encoding="utf-8") as pf:
            for s, labels, train_ex, steps in plans:
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
        for partial, final in saved:
            if os.path.exists(final):
                shutil.rmtree(final)
            os.rename(partial, final)
            for rel, size in _files_under(final, workdir):
                ev.artifact(rel, size)
        os.replace(tmp_pred, pred_path)
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
        knobs = "batch_size %d and max_length %d" % (bs, params["max_length"])
        if is_builtin(params["model"]):
            knobs += ", buckets %d, embed_dim %d" % (params["buckets"], params["embed_dim"])
        raise TrainerError(EXIT_OUT_OF_MEMORY, "out_of_memory",
                           "%s with %s: lower them (--param batch_size=N, --param max_length=N)" % (oom, knobs))
    metrics["fit_seconds"] = time.time() - start
    metrics["steps_per_s"] = clock["real"] / max(clock["fit_s"], 1e-9)
    metrics["steps"] = clock["real"]
    ev.result(metrics, orders, "predictions.jsonl", n_pred, precision=precision, device=device_name)


def fit_schema(torch, device, amp, precision, params, spec, s, labels, train_ex, steps, total_steps, splits,
               mods, env, ev, stop, tok_cache, clock, metrics, pf, seed, versions, saved):
    """Fits one schema's model, saves it under PARTIAL_PREFIX (appending
    the directory and its final name to saved), writes its predictions to
    pf and returns how many."""
    name, multi = s["name"], s["kind"] == "multilabel"
    bs = params["batch_size"]
    val_ex = examples(splits.get("val", []), s, labels)
    ev.status("fitting", "fitting %s on %d items" % (name, len(train_ex)))
    # The same seed before each schema: its model does not depend on the
    # schemas before it.
    set_seed(torch, seed)
    loaded = load_model(params, labels, multi, mods, env, ev, tok_cache)
    ev.log("info", "%s: %s" % (name, loaded.describe))
    model = loaded.model
    model.to(device)
    encode, pad_id = loaded.encode, loaded.pad_id
    tr_ids = encode([t for _, t, _ in train_ex])
    va_ids = encode([t for _, t, _ in val_ex])
    ydt = torch.float if multi else torch.long
    tr_y = torch.tensor([y for _, _, y in train_ex], dtype=ydt)
    va_y = torch.tensor([y for _, _, y in val_ex], dtype=ydt) if val_ex else None
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=params["learning_rate"], weight_decay=params["weight_decay"])
    sched = linear_schedule(torch, opt, int(params["warmup_ratio"] * steps), steps)
    scaler = grad_scaler(torch) if precision == "fp16" else None
    loss_fn = torch.nn.BCEWithLogitsLoss() if multi else torch.nn.CrossEntropyLoss()
    gen = random.Random(seed)
    threshold = params["threshold"]

    def forward(inp, att):
        if amp is not None:
            with torch.autocast(device_type="cuda", dtype=amp):
                out = model(input_ids=inp, attention_mask=att)
        else:
            out = model(input_ids=inp, attention_mask=att)
        return getattr(out, "logits", out).float()

    def by_length(ids_list):
        return sorted(range(len(ids_list)), key=lambda j: len(ids_list[j]))

    def evaluate(ids_list, y):
        model.eval()
        tot, n, correct = 0.0, 0, 0
        with torch.no_grad():
            for idx, inp, att in batches(torch, device, ids_list, by_length(ids_list), bs, pad_id):
                stop.check()
                logits = forward(inp, att)
                yy = y[idx].to(device)
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
    per_epoch = math.ceil(len(tr_ids) / bs)
    for epoch in range(1, params["epochs"] + 1):
        model.train()
        order = list(range(len(tr_ids)))
        gen.shuffle(order)
        tot, n = 0.0, 0
        t_epoch = time.time()
        for idx, inp, att in batches(torch, device, tr_ids, order, bs, pad_id):
            stop.check()
            logits = forward(inp, att)
            loss = loss_fn(logits, tr_y[idx].to(device))
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
            clock["done"] += 1
            clock["real"] += 1
            now = time.time()
            if now - clock["last"] >= 0.2 or clock["done"] == total_steps:
                clock["last"] = now
                rate = clock["done"] / max(now - clock["t0"], 1e-9)
                ev.progress("fit", clock["done"], total_steps, (total_steps - clock["done"]) / rate)
        clock["fit_s"] += time.time() - t_epoch
        ev.metric("train", name + "/loss", tot / max(n, 1), epoch)
        if not val_ex:
            continue
        vloss, vacc = evaluate(va_ids, va_y)
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
        vloss, vacc = evaluate(va_ids, va_y)
        metrics[name + "/val_loss"] = vloss
        metrics[name + "/val_accuracy"] = vacc
    del best, opt, sched, scaler

    workdir = spec["workdir"]
    final_dir = os.path.join(workdir, "model-" + _safe(name))
    out_dir = os.path.join(workdir, PARTIAL_PREFIX + "model-" + _safe(name))
    shutil.rmtree(out_dir, ignore_errors=True)
    saved.append((out_dir, final_dir))
    model.eval()
    loaded.save(out_dir)
    _write_json(os.path.join(out_dir, "labels.json"), {"schema": name, "kind": s["kind"], "labels": labels})
    card = {"format": MODEL_CARD_FORMAT, "v": 1, "trainer": TRAINER, "model_version": MODEL_VERSION,
            "run_id": spec.get("run_id", ""), "schema": name, "kind": s["kind"],
            "annotation_type": s.get("annotation_type", ""), "labels": labels,
            "id2label": {str(i): l for i, l in enumerate(labels)}, "label2id": {l: i for i, l in enumerate(labels)},
            "problem_type": "multi_label_classification" if multi else "single_label_classification",
            "threshold": threshold if multi else None, "merged": bool(loaded.card.get("lora") and params["merge"]),
            "precision": precision, "seed": seed, "train_items": len(train_ex), "val_items": len(val_ex),
            "best_epoch": best_epoch or None, "val_accuracy": vacc, "packages": versions,
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    card.update(loaded.card)
    card["params"] = {k: v for k, v in params.items() if k in spec["params"]}
    _write_json(os.path.join(out_dir, "model_card.json"), card)

    ev.status("predicting", "predicting %s" % name)
    n_pred = 0
    for split in sorted(splits):
        if split == "train":
            continue
        rows = splits[split]
        ids = encode([r["text"] for r in rows])
        with torch.no_grad():
            for idx, inp, att in batches(torch, device, ids, list(range(len(ids))), bs, pad_id):
                stop.check()
                logits = forward(inp, att).cpu()
                for r, j in enumerate(idx):
                    row = logits[r].tolist()
                    probs = [sigmoid(x) for x in row] if multi else softmax(row)
                    pf.write(json.dumps(prediction_row(rows[j]["instance_id"], name, probs, labels,
                                                       multi, threshold),
                                        separators=(",", ":"), ensure_ascii=False) + "\n")
                    n_pred += 1
    return n_pred


def _write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------- main


def main(argv=None, stdout=None, stderr=None, env=None):
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
        train(spec, ev, stop, env)
        return EXIT_FINISHED
    except Cancelled:
        ev.status("cancelled", "stopped on request")
        return EXIT_CANCELLED
    except TrainerError as e:
        detail = getattr(e, "detail", "")
        if detail:
            ev.log("error", detail)
            stderr.write("%s: %s\n" % (TRAINER, detail))
        ev.error(e.code, e.message, e.hint)
        stderr.write("%s: error: %s\n" % (TRAINER, e.message))
        return e.exit_code
    except Exception as e:  # noqa: BLE001 - every failure becomes an error event
        if is_oom(sys.modules.get("torch"), e):
            msg = "out of memory: %s: lower batch_size or max_length (--param batch_size=N, --param max_length=N)" % e
            ev.error("out_of_memory", msg)
            stderr.write("%s: error: %s\n" % (TRAINER, msg))
            return EXIT_OUT_OF_MEMORY
        ev.error("fit_failed", "%s: %s" % (type(e).__name__, e))
        import traceback
        traceback.print_exc(file=stderr)
        return EXIT_UNEXPECTED


if __name__ == "__main__":
    sys.exit(main())
