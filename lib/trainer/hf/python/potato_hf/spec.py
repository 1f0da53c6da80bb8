"""The run's spec.json (TrainingSpec v1 of potato-events(5)) and its
params: what the trainer is asked to do, checked before anything is
imported, and the exit codes and errors it ends with."""

import json
import math
import os

TRAINER = "hf-text-classification"
MODEL_VERSION = "hf-text-classification/1"
DEFAULT_MODEL = "distilbert-base-uncased"
# model=builtin:NAME selects a model of models.py, which needs torch alone.
BUILTIN_PREFIX = "builtin:"
BUILTIN_MODELS = ("ngram",)

# The exit codes of potato-events(5).
EXIT_FINISHED = 0
EXIT_UNEXPECTED = 1
EXIT_BAD_SPEC = 2
EXIT_MISSING_DEPENDENCY = 3
EXIT_CANCELLED = 4
EXIT_OUT_OF_MEMORY = 5
# A model that is neither a directory nor in the cache, and cannot be
# downloaded, is a missing dependency of the run (exit 3).
EXIT_MODEL_UNAVAILABLE = EXIT_MISSING_DEPENDENCY


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


def read_spec(path, trainer=TRAINER):
    """Reads and checks spec.json (TrainingSpec v1) of a run of trainer."""
    try:
        with open(path, encoding="utf-8") as f:
            spec = json.load(f)
    except (OSError, ValueError) as e:
        raise TrainerError(EXIT_BAD_SPEC, "bad_spec", "%s: %s" % (path, e))
    if not isinstance(spec, dict):
        raise TrainerError(EXIT_BAD_SPEC, "bad_spec", "%s: not a JSON object" % path)
    if spec.get("v") != 1:
        raise TrainerError(EXIT_BAD_SPEC, "bad_spec", "%s: version %r, want 1" % (path, spec.get("v")))
    if spec.get("trainer") != trainer:
        raise TrainerError(EXIT_BAD_SPEC, "unknown_trainer",
                           "%s: trainer %r is not %s" % (path, spec.get("trainer"), trainer))
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


# The default learning rates of a transformers model. Its classification
# head is new, its weights drawn at a standard deviation of 0.02: the
# logits it starts with barely differ between items, and AdamW moves each
# weight by about the learning rate a step, so that at 2e-4 a few dozen
# steps leave the head too small to separate the labels whatever the
# encoder gives it (every prediction near 1/labels). The head has its own
# rate; LoRA's adapters, a few hundred thousand weights starting at zero,
# learn at 1e-3.
HEAD_LEARNING_RATE = 1e-2
LORA_LEARNING_RATE = 1e-3

# A transformers model's learning rates by its size: those above are for
# a model of about BERT-base's REFERENCE_PARAMS, which a larger model
# takes divided by the square root of how many times larger it is (large
# models diverge at base models' rates); a smaller model fine-tuned whole
# takes 5e-5 (the top of the rates BERT's authors tried) times that root,
# up to FULL_LEARNING_RATE_MAX (MiniLM-L6, 23 million: 1e-4, the best of
# scripts/bench-quality's grid for it), and LoRA on it keeps 1e-3.
FULL_LEARNING_RATE = 5e-5
FULL_LEARNING_RATE_MIN, FULL_LEARNING_RATE_MAX = 5e-6, 1e-4
LORA_LEARNING_RATE_MIN = 1e-4
REFERENCE_PARAMS = 110e6


# LoRA or every weight, when params.lora is not given, by the model's
# size: an encoder of up to LORA_ABOVE parameters (MiniLM-L6's 23
# million, DistilBERT's 66, BERT-base's 110, RoBERTa-base's 125) is
# fine-tuned whole, as such encoders usually are, and a larger one trains
# LoRA adapters, whose few weights spare the memory and time of updating
# all of its own. On TREC's question types (scripts/bench-quality), LoRA
# r 8 on every layer of all-MiniLM-L6-v2 never learnt the rarest label and
# scored a macro-F1 of 0.722, fine-tuning it whole at 1e-4 0.863.
LORA_ABOVE = 150e6


def lora_for(lora, n_params):
    """Whether a transformers model of n_params parameters trains LoRA
    adapters, and why, for the run log ("" when params.lora said so)."""
    if lora is not None:
        return bool(lora), ""
    on = n_params > LORA_ABOVE
    return on, "%s: the model has %.0f million parameters, %s %.0f million (--param lora=%s sets it)" % (
        "LoRA" if on else "every weight fine-tuned, no LoRA", n_params / 1e6, "more than" if on else "at most",
        LORA_ABOVE / 1e6, "false" if on else "true")


def learning_rate_for(lora, n_params):
    """The default learning rate of a transformers model of n_params
    weights, fine-tuned with LoRA or whole."""
    scale = math.sqrt(REFERENCE_PARAMS / max(1.0, float(n_params)))
    if lora:
        return max(LORA_LEARNING_RATE_MIN, LORA_LEARNING_RATE * min(1.0, scale))
    return min(FULL_LEARNING_RATE_MAX, max(FULL_LEARNING_RATE_MIN, FULL_LEARNING_RATE * scale))


# How a text longer than max_length is cut: head_tail keeps its first
# quarter of max_length's tokens and its last three quarters (Sun et al.
# 2019, How to Fine-Tune BERT for Text Classification: the head and tail
# of a long review or news article classify it better than its head or
# tail alone); head keeps the first tokens (params.json's truncation).
HEAD_SHARE = 0.25

# Class weights of a nominal schema's loss: auto weighs the labels when
# the most frequent label of the train split has at least
# IMBALANCE_RATIO times the items of the least frequent one, balanced
# always, none never. Each label's weight is its inverse frequency,
# n / (labels x n_label), the mean item weight 1, clipped to
# [1/MAX_CLASS_WEIGHT, MAX_CLASS_WEIGHT]: a label of a handful of items
# does not take over the loss. A multilabel schema's loss is weighed by
# balanced alone: each label's positives by negatives / positives,
# clipped to [1, MAX_CLASS_WEIGHT]; auto leaves it unweighed, so that
# its threshold keeps its meaning (params.json's class_weights).
IMBALANCE_RATIO = 3.0
MAX_CLASS_WEIGHT = 10.0


def class_weights(mode, targets, n_labels, multi):
    """The loss's label weights for the targets of the train split (label
    indices, or multi-hot lists), or None for none: (weights, why)."""
    if mode == "none" or not targets:
        return None, ""
    if multi:
        if mode != "balanced":
            return None, ""
        pos = [sum(t[i] for t in targets) for i in range(n_labels)]
        n = len(targets)
        w = [min(MAX_CLASS_WEIGHT, max(1.0, (n - p) / p)) if p else 1.0 for p in pos]
        return w, "each label's positives weighed by its negatives over its positives, at most %g" % MAX_CLASS_WEIGHT
    counts = [0] * n_labels
    for t in targets:
        counts[t] += 1
    present = [c for c in counts if c]
    ratio = max(present) / min(present)
    if mode == "auto" and ratio < IMBALANCE_RATIO:
        return None, ""
    n, k = len(targets), len(present)
    w = [min(MAX_CLASS_WEIGHT, max(1.0 / MAX_CLASS_WEIGHT, n / (k * c))) if c else 1.0 for c in counts]
    why = "the most frequent label has %.1f times the items of the least frequent" % ratio
    if mode == "auto":
        why += " (%g or more)" % IMBALANCE_RATIO
    return w, why + ": each label weighed by its inverse frequency, clipped to [%g, %g]" % (
        1.0 / MAX_CLASS_WEIGHT, MAX_CLASS_WEIGHT)


# max_length by default: the 95th percentile of the token lengths of the
# train split's items, rounded up to a multiple of 8, at least
# AUTO_MAX_LENGTH_MIN and at most the cap and the model's own limit.
# Short items (questions, messages) are not padded to the cap, and long
# ones (articles, emails) are cut at it: 256 on a GPU, 128 on the CPU,
# where a step at 256 takes more than twice as long (attention grows with
# the square of the length) and buys less than its cost once head and
# tail are kept; --param max_length=N sets it.
AUTO_MAX_LENGTH_PERCENTILE = 95
AUTO_MAX_LENGTH_MIN = 16
AUTO_MAX_LENGTH_CAP = 256
AUTO_MAX_LENGTH_CAP_CPU = 128


def auto_max_length(lengths, limit=None):
    """max_length for items of these token lengths (special tokens
    included), at most limit (default AUTO_MAX_LENGTH_CAP): (max_length,
    the percentile's length)."""
    cap = AUTO_MAX_LENGTH_CAP if limit is None else limit
    if not lengths:
        return min(cap, 128), 0
    xs = sorted(lengths)
    pct = xs[min(len(xs) - 1, int(math.ceil(AUTO_MAX_LENGTH_PERCENTILE / 100.0 * len(xs))) - 1)]
    n = int(math.ceil(pct / 8.0)) * 8
    return max(min(AUTO_MAX_LENGTH_MIN, cap), min(cap, n)), pct


def head_tail(ids, budget, mode="head_tail"):
    """ids cut to budget: the first quarter and last three quarters of the
    budget (head_tail), or the first budget (head)."""
    if len(ids) <= budget:
        return list(ids)
    if budget <= 0:
        return []
    if mode == "head":
        return list(ids[:budget])
    head = max(1, int(round(budget * HEAD_SHARE))) if budget > 1 else budget
    tail = budget - head
    return list(ids[:head]) + (list(ids[-tail:]) if tail else [])


# The parameters, declared once in params.json beside this module (Go's
# registry reads the same file): each row's name, kind, default as a
# --param value ("" or absent when the trainer chooses it, below), the
# bounds of a number (min, max; min_open, max_open leave the bound out)
# and a str's choices. Values arrive as strings (--param KEY=VALUE).
PARAMS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "params.json")


def _typed(kind, s):
    """s, a --param value, as kind; ValueError names what it is not."""
    s = str(s).strip()
    if kind == "str":
        return s
    if kind == "bool":
        if s.lower() in ("1", "true", "yes", "on"):
            return True
        if s.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError("true or false")
    if kind == "int":
        try:
            return int(s)
        except ValueError:
            raise ValueError("a whole number")
    if kind == "float":
        try:
            x = float(s)
        except ValueError:
            raise ValueError("a number")
        if not math.isfinite(x):
            raise ValueError("a number")
        return x
    if kind == "list":
        return [p.strip() for p in s.split(",") if p.strip()]
    raise ValueError("of a known kind")


def _read_params(path):
    with open(path, encoding="utf-8") as f:
        rows = json.load(f)
    return {r["name"]: dict(r, default=_typed(r["kind"], r["default"]) if r.get("default", "") != "" else None)
            for r in rows}


# name: its row, the default typed (None when the trainer chooses it).
PARAM_ROWS = _read_params(PARAMS_FILE)
# name: (kind, default).
PARAMS = {name: (r["kind"], r["default"]) for name, r in PARAM_ROWS.items()}


def _num(x):
    return "%d" % x if float(x).is_integer() else repr(float(x))


def range_text(row):
    """What a value out of the row's bounds is not, as the Go registry says
    it: "1 or more", "more than 0", "at least 0 and below 1"."""
    lo, hi = row.get("min"), row.get("max")
    lo_open, hi_open = row.get("min_open", False), row.get("max_open", False)
    if lo is not None and hi is not None:
        if lo_open and hi_open:
            return "between %s and %s" % (_num(lo), _num(hi))
        return "%s %s and %s %s" % ("above" if lo_open else "at least", _num(lo),
                                    "below" if hi_open else "at most", _num(hi))
    if lo is not None:
        return ("more than %s" if lo_open else "%s or more") % _num(lo)
    if hi is not None:
        return ("below %s" if hi_open else "at most %s") % _num(hi)
    return ""


def in_range(row, x):
    lo, hi = row.get("min"), row.get("max")
    if lo is not None and (x < lo or row.get("min_open") and x == lo):
        return False
    if hi is not None and (x > hi or row.get("max_open") and x == hi):
        return False
    return True


def or_list(xs):
    return xs[0] if len(xs) < 2 else ", ".join(xs[:-1]) + " or " + xs[-1]


def is_builtin(model):
    return model.startswith(BUILTIN_PREFIX)


def _bad_param(key, value, what):
    return TrainerError(EXIT_BAD_SPEC, "bad_spec", "param %s=%r is not %s" % (key, value, what))


# EXTEND, when set (become), takes the typed params and the raw ones and
# returns them checked and completed: another trainer's own params.
EXTEND = None


def become(trainer, model_version, params, extend):
    """Makes this package another trainer of the same loop (llm.py): its
    name, model version, PARAMS table and EXTEND. Called by that trainer's
    launcher before any other module of the package is imported, since
    they bind TRAINER and MODEL_VERSION as they import."""
    global TRAINER, MODEL_VERSION, PARAMS, PARAM_ROWS, EXTEND
    TRAINER, MODEL_VERSION, PARAMS, EXTEND = trainer, model_version, params, extend
    # A parameter of its own has no row of params.json: extend checks it.
    PARAM_ROWS = {name: PARAM_ROWS.get(name) or {"name": name, "kind": kind} for name, (kind, _) in params.items()}


def parse_params(raw):
    """The spec's params, typed, with defaults. Unknown keys are ignored."""
    raw = raw or {}
    out = {}
    given = []
    for key, (kind, default) in PARAMS.items():
        if key not in raw or raw[key] in (None, ""):
            out[key] = default
            continue
        try:
            out[key] = _typed(kind, raw[key])
        except ValueError as e:
            raise _bad_param(key, raw[key], str(e))
        given.append(key)
    builtin = is_builtin(out["model"])
    if builtin and out["model"][len(BUILTIN_PREFIX):] not in BUILTIN_MODELS:
        raise _bad_param("model", raw.get("model"), "a directory, a model name or one of "
                         + ", ".join(BUILTIN_PREFIX + m for m in BUILTIN_MODELS))
    for key in given:
        row = PARAM_ROWS[key]
        if row.get("choices") and out[key] not in row["choices"]:
            raise _bad_param(key, raw[key], or_list(row["choices"]))
        if row["kind"] in ("int", "float") and not in_range(row, out[key]):
            raise _bad_param(key, raw[key], range_text(row))
    out["auto_epochs"] = out["epochs"] is None and not builtin
    out["auto_learning_rate"] = out["learning_rate"] is None and not builtin
    if out["max_length"] is None and builtin:
        out["max_length"] = 128
    if out["epochs"] is None:
        out["epochs"] = 8 if builtin else 3
    if out["batch_size"] is None:
        out["batch_size"] = 32 if builtin else 16
    if out["learning_rate"] is None:
        out["learning_rate"] = 0.01 if builtin else (LORA_LEARNING_RATE if out["lora"] else FULL_LEARNING_RATE)
    if out["head_learning_rate"] is None:
        out["head_learning_rate"] = out["learning_rate"] if builtin else HEAD_LEARNING_RATE
    if EXTEND is not None:
        out = EXTEND(out, raw)
    return out


# Without the param, a transformers model trains at least 3 epochs, and
# more on a small train split, up to AUTO_EPOCHS_MAX: enough for about
# AUTO_EPOCHS_STEPS steps. On 91 emails of the SpamAssassin corpus, 3
# epochs are 18 steps of 16, and a fit of so few steps may end before the
# model has moved (held-out accuracy 0.53 seen); early stopping on the val
# loss ends the extra epochs once they stop helping.
AUTO_EPOCHS_STEPS = 100
AUTO_EPOCHS_MAX = 10


def epochs_for(params, n_train):
    """The epochs of a fit on n_train items: the param's, or by default
    3, raised on a small train split to make about AUTO_EPOCHS_STEPS steps,
    at most AUTO_EPOCHS_MAX."""
    if not params.get("auto_epochs"):
        return params["epochs"]
    per_epoch = max(1, math.ceil(n_train / params["batch_size"]))
    return min(AUTO_EPOCHS_MAX, max(params["epochs"], math.ceil(AUTO_EPOCHS_STEPS / per_epoch)))


def check_schemas(spec):
    for s in spec["schemas"]:
        if s.get("kind") not in ("nominal", "multilabel", "ordinal"):
            raise TrainerError(EXIT_BAD_SPEC, "validation_failed",
                               "schema %s is %s (%s): %s learns radio, select, multiselect and likert schemas; "
                               "an exec:PROGRAM trainer of your own, given the schema in the bundle, can learn "
                               "the others (potato-config(5), SCHEMA KINDS)"
                               % (s.get("name"), s.get("kind"), s.get("annotation_type"), TRAINER))

