"""The run's spec.json (TrainingSpec v1 of potato-events(5)) and its
params: what the trainer is asked to do, checked before anything is
imported, and the exit codes and errors it ends with."""

import json
import math

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
# takes 2e-5 times that root, up to FULL_LEARNING_RATE_MAX (MiniLM-L6, 23
# million: 4.4e-5), and LoRA on it keeps 1e-3.
FULL_LEARNING_RATE = 2e-5
FULL_LEARNING_RATE_MIN, FULL_LEARNING_RATE_MAX = 5e-6, 1e-4
LORA_LEARNING_RATE_MIN = 1e-4
REFERENCE_PARAMS = 110e6


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
# tail alone); head keeps the first tokens.
TRUNCATIONS = ("head_tail", "head")
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
# its threshold keeps its meaning.
CLASS_WEIGHTS = ("auto", "balanced", "none")
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


# name: (kind, default). Values arrive as strings (--param KEY=VALUE).
PARAMS = {
    "model": ("str", DEFAULT_MODEL),
    "lora": ("bool", True),
    "merge": ("bool", False),
    "lora_r": ("int", 8),
    "lora_alpha": ("int", 16),
    "lora_dropout": ("float", 0.1),
    "attention_dropout": ("float", 0.0),  # models.ATTENTION_DROPOUT_KEYS
    "target_modules": ("list", None),
    "epochs": ("int", None),  # 3, more on a small train split (epochs_for); 8 for builtin:ngram
    "batch_size": ("int", None),  # 16; 32 for builtin:ngram
    "learning_rate": ("float", None),  # 1e-3 with LoRA, 2e-5 without, 0.01 for builtin:ngram
    "head_learning_rate": ("float", None),  # 0.01; builtin:ngram: learning_rate
    "weight_decay": ("float", 0.01),
    "warmup_ratio": ("float", 0.06),
    "max_length": ("int", None),  # from the train split (auto_max_length); 128 words for builtin:ngram
    "truncation": ("str", "head_tail"),
    "patience": ("int", 1),
    "class_weights": ("str", "auto"),
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


# EXTEND, when set (become), takes the typed params and the raw ones and
# returns them checked and completed: another trainer's own params.
EXTEND = None


def become(trainer, model_version, params, extend):
    """Makes this package another trainer of the same loop (llm.py): its
    name, model version, PARAMS table and EXTEND. Called by that trainer's
    launcher before any other module of the package is imported, since
    they bind TRAINER and MODEL_VERSION as they import."""
    global TRAINER, MODEL_VERSION, PARAMS, EXTEND
    TRAINER, MODEL_VERSION, PARAMS, EXTEND = trainer, model_version, params, extend


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
    out["auto_epochs"] = out["epochs"] is None and not builtin
    out["auto_learning_rate"] = out["learning_rate"] is None and not builtin
    if out["max_length"] is None and builtin:
        out["max_length"] = 128
    if out["epochs"] is None:
        out["epochs"] = 8 if builtin else 3
    if out["batch_size"] is None:
        out["batch_size"] = 32 if builtin else 16
    for key in ("epochs", "batch_size", "max_length", "lora_r", "lora_alpha", "embed_dim", "word_ngrams"):
        if out[key] is not None and out[key] < 1:
            raise _bad_param(key, raw.get(key), "1 or more")
    if out["buckets"] < 16:
        raise _bad_param("buckets", raw.get("buckets"), "16 or more")
    if out["char_ngrams"] < 0:
        raise _bad_param("char_ngrams", raw.get("char_ngrams"), "0 (none) or more")
    if out["max_grad_norm"] < 0:
        raise _bad_param("max_grad_norm", raw.get("max_grad_norm"), "0 (no clipping) or more")
    for key in ("lora_dropout", "attention_dropout"):
        if not 0 <= out[key] < 1:
            raise _bad_param(key, raw.get(key), "at least 0 and below 1")
    if out["learning_rate"] is None:
        out["learning_rate"] = 0.01 if builtin else (LORA_LEARNING_RATE if out["lora"] else 2e-5)
    elif out["learning_rate"] <= 0:
        raise _bad_param("learning_rate", raw.get("learning_rate"), "more than 0")
    if out["head_learning_rate"] is None:
        out["head_learning_rate"] = out["learning_rate"] if builtin else HEAD_LEARNING_RATE
    elif out["head_learning_rate"] <= 0:
        raise _bad_param("head_learning_rate", raw.get("head_learning_rate"), "more than 0")
    if out["truncation"] not in TRUNCATIONS:
        raise _bad_param("truncation", raw.get("truncation"), " or ".join(TRUNCATIONS))
    if out["class_weights"] not in CLASS_WEIGHTS:
        raise _bad_param("class_weights", raw.get("class_weights"), "auto, balanced or none")
    if out["precision"] not in ("auto", "fp32", "bf16", "fp16"):
        raise _bad_param("precision", raw.get("precision"), "auto, fp32, bf16 or fp16")
    if not 0 < out["threshold"] < 1:
        raise _bad_param("threshold", raw.get("threshold"), "between 0 and 1")
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
        if s.get("kind") not in ("nominal", "multilabel"):
            raise TrainerError(EXIT_BAD_SPEC, "validation_failed",
                               "schema %s is %s (%s): %s learns radio, select and multiselect schemas"
                               % (s.get("name"), s.get("kind"), s.get("annotation_type"), TRAINER))

