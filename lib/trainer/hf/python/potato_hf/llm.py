"""hf-llm-classification: the same loop, events and artifacts as
hf-text-classification, on a decoder LLM (Llama, Qwen, Gemma, Mistral:
whatever transformers' AutoModelForSequenceClassification builds, which
for a decoder is a linear "score" head on the last token's hidden state),
with LoRA through peft on its weights as they are, or on 4-bit (NF4 with
double quantization) or 8-bit weights through bitsandbytes on a CUDA GPU.

Before the model is loaded, the run estimates the memory it needs
(memory.py) and, on a GPU, refuses to start when the GPU's free memory is
less. A run that still runs out of memory is tried once more at half the
batch, grad_accum doubled to keep the effective batch.

mode=zero-shot trains nothing: an instruction-tuned model is prompted
with the schema's description and labels, and each label scored by the
probability the model gives its name as the answer.

The launcher (hf_llm_classification.py) calls install() before any other
module of the package is imported: they then bind this trainer's name."""

import importlib.util
import math
import os

from . import memory
from . import spec as _spec

TRAINER = "hf-llm-classification"
MODEL_VERSION = "hf-llm-classification/1"
QUANTIZE = ("none", "4bit", "8bit")
MODES = ("fine-tune", "zero-shot")
# A model directory may be a hub name's place under POTATO_MODEL_CACHE.
MODEL_CACHE_ENV = "POTATO_MODEL_CACHE"
DEFAULT_BATCH = 8
# The refusal of a quantized run where it cannot run, worded as
# lib/check's (quantizeRefusal): check says it before a run, the run the
# same.
QUANTIZE_REFUSAL = ("quantize=%s needs bitsandbytes on a CUDA GPU, and %s: set --param quantize=none "
                    "to train the weights unquantized")


def quantize_refusal(quantize, device_type, have_bnb):
    """The sentence refusing quantize on this device, or "" when it can run."""
    if quantize == "none":
        return ""
    if device_type != "cuda":
        return QUANTIZE_REFUSAL % (quantize, "this run would train on the " + ("CPU" if device_type == "cpu"
                                                                                 else device_type))
    if not have_bnb:
        return QUANTIZE_REFUSAL % (quantize, "bitsandbytes is not installed for this interpreter")
    return ""


def llm_params():
    """hf-text-classification's PARAMS with this trainer's defaults and its
    own: quantize, gradient_checkpointing, grad_accum, mode, prompt."""
    p = dict(_spec.PARAMS)
    p.update({
        "model": ("str", "HuggingFaceTB/SmolLM2-135M-Instruct"),
        "lora": ("bool", True),  # LoRA whatever the model's size
        "batch_size": ("int", DEFAULT_BATCH),
        "learning_rate": ("float", None),
        "quantize": ("str", "none"),
        "gradient_checkpointing": ("bool", None),  # on for a quantized run and on a GPU, off on the CPU
        "grad_accum": ("int", None),  # 1, or 2 after the first out of memory
        "mode": ("str", "fine-tune"),
        "prompt": ("str", ""),
    })
    return p


def extend(out, raw):
    """Checks and completes this trainer's params (spec.EXTEND)."""
    def bad(key, what):
        return _spec.TrainerError(_spec.EXIT_BAD_SPEC, "bad_spec", "param %s=%r is not %s" % (key, raw.get(key), what))
    if not out.get("model") or _spec.is_builtin(out["model"]):
        raise bad("model", "a model directory, a .gguf file or a model name (--param model=...)")
    if out["quantize"] not in QUANTIZE:
        raise bad("quantize", " or ".join(QUANTIZE))
    if out["mode"] not in MODES:
        raise bad("mode", " or ".join(MODES))
    if out["grad_accum"] is None:
        out["grad_accum"] = 1
    elif out["grad_accum"] < 1:
        raise bad("grad_accum", "1 or more")
    if out["quantize"] != "none" and not out["lora"]:
        raise bad("lora", "true with quantize=%s: quantized weights cannot be trained" % out["quantize"])
    out["loader"] = load_llm
    pk = ["torch", "transformers", "peft", "jinja2"] if out["lora"] else ["torch", "transformers"]
    if out["quantize"] != "none":
        pk.append("bitsandbytes")
    out["packages"] = pk
    return out


def install():
    """Makes the package this trainer (spec.become)."""
    _spec.become(TRAINER, MODEL_VERSION, llm_params(), extend)


def have_module(name):
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def resolve_model(name, env):
    """Where the model is: (directory or hub name, gguf file name or None,
    what it is). A .gguf file is read from its directory; a directory
    holding one .gguf file and no config.json is that file; a name that is
    a directory under POTATO_MODEL_CACHE is that directory; any other name
    is a hub name, read from the cache (HF_HOME) by hub.pretrained."""
    if os.path.isfile(name) and name.endswith(".gguf"):
        d, f = os.path.split(os.path.abspath(name))
        return d, f, "GGUF file %s" % name
    if os.path.isdir(name):
        ggufs = sorted(n for n in os.listdir(name) if n.endswith(".gguf"))
        if ggufs and not os.path.exists(os.path.join(name, "config.json")):
            if len(ggufs) > 1:
                raise _spec.TrainerError(_spec.EXIT_BAD_SPEC, "bad_spec", "model directory %s holds %d GGUF files "
                                         "(%s): pass --param model= one of them" % (name, len(ggufs), ", ".join(ggufs)))
            return name, ggufs[0], "GGUF file %s" % os.path.join(name, ggufs[0])
        return name, None, "directory %s" % name
    cache = env.get(MODEL_CACHE_ENV)
    if cache and os.path.isdir(os.path.join(cache, name)):
        d, g, _ = resolve_model(os.path.join(cache, name), env)
        return d, g, "%s under %s=%s" % (name, MODEL_CACHE_ENV, cache)
    return name, None, "hub name %s, from the cache" % name


def hub_snapshot(name, env):
    """The newest cached snapshot directory of hub name, or None."""
    from .hub import hub_cache_dir
    root = os.path.join(hub_cache_dir(env), "models--" + name.replace("/", "--"), "snapshots")
    try:
        snaps = [os.path.join(root, s) for s in os.listdir(root)]
    except OSError:
        return None
    snaps = [s for s in snaps if os.path.exists(os.path.join(s, "config.json"))]
    return max(snaps, key=os.path.getmtime) if snaps else None


def card_license(model_dir):
    """The licence the model card (README.md's front matter) states, or ""."""
    try:
        with open(os.path.join(model_dir, "README.md"), encoding="utf-8") as f:
            text = f.read(65536)
    except OSError:
        return ""
    if not text.startswith("---"):
        return ""
    for line in text.split("\n")[1:]:
        if line.strip() == "---":
            break
        key, _, value = line.partition(":")
        if key.strip() == "license":
            return value.strip().strip("'\"")
    return ""


def model_facts(name, env):
    """(shape, licence, where it was read) of the model, or (None, "", why not)."""
    d, g, what = resolve_model(name, env)
    if g:
        shape, lic, _ = memory.shape_from_gguf(os.path.join(d, g))
        return shape, lic, what
    if not os.path.isdir(d):
        d = hub_snapshot(name, env)
        if d is None:
            return None, "", "hub name %s is not in the cache" % name
    try:
        return memory.shape_from_config(memory.read_config(d)), card_license(d), what
    except (OSError, ValueError) as e:
        return None, "", "%s: %s" % (d, e)


def default_targets(shape):
    return list(LLAMA_TARGETS)


LLAMA_TARGETS = ("q_proj", "v_proj")


def check_memory(params, spec, ev, torch, device, n_labels, free_mib=None):
    """Logs the estimate and, on a CUDA device, refuses a run that would
    not fit in its free memory (torch's mem_get_info, nvidia-smi's free)."""
    shape, lic, what = model_facts(params["model"], os.environ)
    if lic:
        ev.log("info", "%s: licence %s, as its model card says" % (what, lic))
    if shape is None:
        ev.log("warning", "no memory estimate: %s" % what)
        return None, lic
    length = memory.auto_length(params["max_length"]) if device.type == "cuda" else (params["max_length"] or 128)
    targets = params["target_modules"] or default_targets(shape)
    precision = "fp32" if device.type != "cuda" else "bf16"
    est = memory.estimate(shape, params["quantize"], params["lora_r"], targets, n_labels, params["batch_size"],
                          length, params["gradient_checkpointing"], device.type, precision)
    if device.type == "cuda" and free_mib is None:
        free_b, _ = torch.cuda.mem_get_info(device)
        free_mib = free_b / memory.MIB
    where = "%.0f MiB free on %s" % (free_mib, device) if free_mib is not None else "the %s's memory" % device.type
    ev.log("info", "memory estimate: %s for %.0f million parameters, quantize %s, LoRA rank %d, batch %d of %d "
           "tokens, gradient checkpointing %s; %s" % (
               memory.describe(est), est["params"] / 1e6, params["quantize"], params["lora_r"],
               params["batch_size"], length, "on" if params["gradient_checkpointing"] else "off", where))
    if free_mib is not None and not memory.fits(est, free_mib):
        raise _spec.TrainerError(
            _spec.EXIT_OUT_OF_MEMORY, "out_of_memory",
            "the run would not fit: it needs about %s, and %s has %.0f MiB free: lower %s" % (
                memory.describe(est), device, free_mib, memory.lower_what(params, est)))
    return est, lic


# What the run settled before the fit, for load_llm: the device, the
# precision, the base model's licence.
RUN = {"device": "cpu", "precision": "fp32", "license": ""}


def resident_mib():
    """The process's resident memory now, in MiB (Linux), or None."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


def train(spec, ev, stop, env=None):
    """The run: the device's settings and refusals, then zero-shot or the
    fit of loop.train; a fit that runs out of memory is tried once more at
    half the batch, grad_accum doubled."""
    from .device import choose_precision, resolve_device
    from .loop import train as fit
    from .packages import import_packages
    env = os.environ if env is None else env
    params = _spec.parse_params(spec["params"])
    (torch,) = import_packages(("torch",), "for model=%s" % params["model"])
    cuda_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    mps = getattr(torch.backends, "mps", None)
    dev_name, _ = resolve_device(spec["limits"].get("device"), env, cuda_count,
                                 bool(mps is not None and mps.is_available()))
    device = torch.device(dev_name)
    refusal = quantize_refusal(params["quantize"], device.type, have_module("bitsandbytes"))
    if refusal:
        raise _spec.TrainerError(_spec.EXIT_MISSING_DEPENDENCY, "missing_dependency", refusal,
                                 "pip install bitsandbytes" if device.type == "cuda" else "")
    cap = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    precision, _ = choose_precision(params["precision"], device.type, cap)
    RUN.update(device=dev_name, precision=precision)
    raw = dict(spec["params"])
    if params["gradient_checkpointing"] is None:
        on = device.type == "cuda"
        raw["gradient_checkpointing"] = "true" if on else "false"
        ev.log("info", "gradient checkpointing %s: %s (--param gradient_checkpointing=BOOL sets it)" % (
            "on" if on else "off", "on a GPU it trades a second forward pass for the activations' memory" if on
            else "on the CPU memory is seldom what runs out, and it costs a second forward pass"))
    spec = dict(spec, params=raw)
    params = _spec.parse_params(raw)
    if params["mode"] == "zero-shot":
        from .zeroshot import zero_shot
        return zero_shot(spec, params, ev, stop, env, torch, device)
    n_labels = max([len(s.get("labels") or []) for s in spec["schemas"]] + [2])
    _, RUN["license"] = check_memory(params, spec, ev, torch, device, n_labels)
    # The process before any model is loaded, its packages imported: what
    # the estimate's CPU figure is measured above (llm_memory_test).
    import_packages(tuple(params["packages"]), "for model=%s" % params["model"])
    rss = resident_mib()
    if rss is not None:
        ev.log("info", "memory: %.0f MiB resident before the model is loaded" % rss)
    try:
        return fit(spec, ev, stop, env)
    except _spec.TrainerError as e:
        if e.code != "out_of_memory" or params["batch_size"] < 2:
            raise
        bs, accum = params["batch_size"] // 2, params["grad_accum"] * 2
        ev.log("warning", "%s; trying once more at batch_size %d with grad_accum %d, the same effective batch "
               "of %d" % (e.message, bs, accum, bs * accum))
        spec = dict(spec, params=dict(raw, batch_size=str(bs), grad_accum=str(accum)))
        return fit(spec, ev, stop, env)


def load_llm(params, labels, multi, mods, env, ev, cache):
    """The decoder for one schema (models.Loaded): the model of the param,
    from a directory, a GGUF file (dequantized by transformers) or the
    cache, quantized as asked on a CUDA GPU, with LoRA adapters."""
    from .hub import pretrained
    from .models import (HEAD_NAMES, HashTokenizer, Loaded, _conv1d_class, _dtype_kw, choose_max_length,
                         has_tokenizer, lora_targets)
    from .spec import head_tail
    from .artifacts import write_json
    torch, transformers, peft = mods["torch"], mods["transformers"], mods.get("peft")
    device = torch.device(RUN["device"])
    src, gguf, what = resolve_model(params["model"], env)
    gkw = {"gguf_file": gguf} if gguf else {}
    kw = {"num_labels": len(labels), "id2label": {i: l for i, l in enumerate(labels)},
          "label2id": {l: i for i, l in enumerate(labels)},
          "problem_type": "multi_label_classification" if multi else "single_label_classification"}
    config = pretrained(transformers.AutoConfig.from_pretrained, src, env, **dict(kw, **gkw))
    random_init = os.path.isdir(src) and not gguf and not any(
        n.endswith((".safetensors", ".bin")) for n in os.listdir(src))
    if cache.value is None:
        if random_init and not has_tokenizer(src):
            tok = HashTokenizer(config.vocab_size)
            max_len, why = choose_max_length(params, config, [len(tok.encode(t)) for t in cache.train_texts],
                                             None, ev, cache.device_type)

            def encode(texts):
                return [tok.encode(t, max_len, params["truncation"]) for t in texts]

            def save_tok(d):
                write_json(os.path.join(d, "hash-tokenizer.json"), tok.settings())
            cache.value = (encode, tok.pad_id, save_tok, max_len, why, "hash-tokenizer.json")
        else:
            hf_tok = pretrained(transformers.AutoTokenizer.from_pretrained, src, env, **gkw)
            if hf_tok.pad_token is None:
                hf_tok.pad_token = hf_tok.eos_token or hf_tok.unk_token
                ev.log("info", "the tokenizer has no pad token: batches are padded with %s, which the attention "
                       "mask hides and the score head skips" % hf_tok.pad_token)
            if hf_tok.pad_token is None:
                raise _spec.TrainerError(_spec.EXIT_BAD_SPEC, "bad_spec", "the tokenizer of %s has no pad, eos "
                                         "or unk token to pad batches with" % src)
            hf_tok.padding_side = "right"
            probe = hf_tok(["a"], add_special_tokens=True)["input_ids"][0]
            own = hf_tok(["a"], add_special_tokens=False)["input_ids"][0]
            at = next((i for i in range(len(probe) - len(own) + 1) if list(probe[i:i + len(own)]) == list(own)), 0)
            prefix, suffix = list(probe[:at]), list(probe[at + len(own):])

            def tokens(texts):
                texts = [t if t else " " for t in texts]
                return hf_tok(texts, add_special_tokens=False, truncation=False, verbose=False)["input_ids"] \
                    if texts else []
            max_len, why = choose_max_length(
                params, config, [len(x) + len(prefix) + len(suffix) for x in tokens(cache.train_texts)],
                getattr(hf_tok, "model_max_length", None), ev, cache.device_type)

            def encode(texts):
                budget = max(0, max_len - len(prefix) - len(suffix))
                return [prefix + head_tail(x, budget, params["truncation"]) + suffix for x in tokens(texts)]
            cache.value = (encode, hf_tok.pad_token_id, hf_tok.save_pretrained, max_len, why, "the model's")
        if cache.value[4]:
            ev.log("warning", cache.value[4])
        cache.max_length = cache.value[3]
    encode, pad_id, save_tok, max_len, _, tok_kind = cache.value
    # The score head pools the last token that is not padding.
    config.pad_token_id = pad_id
    config.use_cache = False
    cuda = device.type == "cuda"
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(RUN["precision"]) if cuda else None
    mkw = dict(kw, config=config, ignore_mismatched_sizes=True, **gkw)
    placed = False
    if params["quantize"] != "none":
        bnb = transformers.BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=half or torch.float32) if params["quantize"] == "4bit" else \
            transformers.BitsAndBytesConfig(load_in_8bit=True)
        mkw.update(quantization_config=bnb, device_map={"": device.index or 0})
        mkw.update(_dtype_kw(transformers, torch))
        if half is not None:
            mkw[next(iter(_dtype_kw(transformers, torch)))] = half
        placed = True
    elif cuda and half is not None:
        # The frozen weights in the GPU's half precision; what trains, in fp32.
        mkw.update({k: half for k in _dtype_kw(transformers, torch)})
    else:
        mkw.update(_dtype_kw(transformers, torch))
    for k in ("num_labels", "id2label", "label2id", "problem_type"):
        mkw.pop(k, None)
    if random_init:
        model = transformers.AutoModelForSequenceClassification.from_config(config)
        ev.log("info", "%s holds no weights: built from its config with random weights" % src)
    else:
        model = pretrained(transformers.AutoModelForSequenceClassification.from_pretrained, src, env, **mkw)
    if params["quantize"] != "none":
        model = peft.prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=bool(params["gradient_checkpointing"]),
            gradient_checkpointing_kwargs={"use_reentrant": False})
    elif params["gradient_checkpointing"]:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    lora = None
    if params["lora"]:
        targets, why, conv = lora_targets(model, config, params["target_modules"], torch, _conv1d_class(transformers))
        head = [n for n, _ in model.named_children() if n in HEAD_NAMES]
        model = peft.get_peft_model(model, peft.LoraConfig(
            task_type=peft.TaskType.SEQ_CLS, r=params["lora_r"], lora_alpha=params["lora_alpha"],
            lora_dropout=params["lora_dropout"], target_modules=targets, modules_to_save=head or None))
        lora = {"r": params["lora_r"], "alpha": params["lora_alpha"], "dropout": params["lora_dropout"],
                "target_modules": targets, "modules_to_save": head, "why": why}
    for p in model.parameters():
        if p.requires_grad and p.dtype != torch.float32:
            p.data = p.data.float()
    n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
    head_params = [p for n, p in model.named_parameters() if p.requires_grad and (
        "lora_" not in n if lora is not None else n.split(".")[0] in HEAD_NAMES)]

    def save(out_dir):
        os.makedirs(out_dir, exist_ok=True)
        if lora is not None and params["merge"] and params["quantize"] == "none":
            model.save_pretrained(os.path.join(out_dir, "adapter"))
            config.save_pretrained(os.path.join(out_dir, "adapter"))
            save_tok(os.path.join(out_dir, "adapter"))
            model.merge_and_unload().save_pretrained(out_dir)
        else:
            model.save_pretrained(out_dir)
            config.save_pretrained(out_dir)
        save_tok(out_dir)
        return []

    n_all = sum(p.numel() for p in model.parameters())
    lora_what = "LoRA on %s (%s)" % (",".join(lora["target_modules"]), lora["why"]) if lora else "full fine-tuning"
    card = {"base_model": src, "gguf_file": gguf, "license": RUN["license"] or None, "lora": lora,
            "quantize": params["quantize"], "gradient_checkpointing": bool(params["gradient_checkpointing"]),
            "grad_accum": params["grad_accum"], "max_length": max_len, "truncation": params["truncation"],
            "tokenizer": tok_kind, "head": "score: a linear layer on the last token's hidden state"}
    return Loaded(model, encode, pad_id, save, card, "%s (%s, %.0f million parameters%s): %s, %d trainable "
                  "parameters" % (src, what, n_all / 1e6, ", quantize %s" % params["quantize"]
                                  if params["quantize"] != "none" else "", lora_what, n_train),
                  head_params, placed)
