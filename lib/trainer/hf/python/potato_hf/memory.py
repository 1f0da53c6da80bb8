"""Will it fit? The memory a LoRA fine-tune of a decoder needs, estimated
before any weight is loaded from the model's shape (config.json, or a
GGUF file's metadata): its weights as the quantization stores them, the
adapter's and the head's weights with their gradients and AdamW's state,
and the activations a batch keeps for the backward pass, with gradient
checkpointing or without. Standard library alone.

The activations' constants were measured: the peak resident memory of a
LoRA step on the CPU, above the process's before the model was built,
for decoders of three sizes built from a LlamaConfig (the test of
lib/trainer/hf, llm_memory_test.py); scripts/gpu-check compares the
estimate with a GPU's peak on a real one."""

import json
import math
import os

MIB = float(1 << 20)

# Bytes per weight of the base model's linear layers: fp32 on the CPU,
# bf16 or fp16 on a GPU; NF4 with double quantization stores half a byte
# and a block's constants (64 weights to an 8-bit constant, 256 constants
# to an fp32 one: 0.127 bits a weight); 8-bit one byte and a row's fp32
# scale. Embeddings and norms stay in the compute precision.
BITS_4BIT = 4.127
# AdamW trains the adapter in fp32: its weight, gradient and two moments,
# and the best epoch's copy (loop.BestState): 20 bytes a parameter.
TRAINABLE_BYTES = 20
# Kept for the backward pass, per token and layer, in elements of the
# compute precision: ACT_HIDDEN of the hidden size and ACT_INTER of the
# MLP's (a Llama-family layer: the norms' inputs and outputs, q, k, v,
# the attention's output, the LoRA dropout's copies, the residuals, the
# MLP's gate, up, their product and its activation). With gradient
# checkpointing, each layer's input and its gradient (CKPT_HIDDEN of the
# hidden size; the other two the attention mask's and position
# embeddings' share), and CKPT_LAYERS layers' whole: the one recomputed
# and the gradients through it. Fitted to the CPU's peak resident memory
# of decoders of three sizes, checkpointing on the largest
# (TestLLMMemoryEstimate).
ACT_HIDDEN = 16
ACT_INTER = 7
CKPT_HIDDEN = 4
CKPT_LAYERS = 2
# On the CPU, what the allocator holds beside the tensors.
CPU_OVERHEAD_MIB = 30
# Beside the tensors: a CUDA context and the caching allocator's slack.
CUDA_CONTEXT_MIB = 600
ALLOCATOR_SLACK = 1.10


def shape_from_config(cfg):
    """The shape the estimate needs from a config.json's dict."""
    h = int(cfg.get("hidden_size") or cfg.get("n_embd") or 0)
    heads = int(cfg.get("num_attention_heads") or cfg.get("n_head") or 1)
    return {
        "model_type": cfg.get("model_type", ""),
        "hidden": h,
        "intermediate": int(cfg.get("intermediate_size") or 4 * h),
        "layers": int(cfg.get("num_hidden_layers") or cfg.get("n_layer") or 0),
        "heads": heads,
        "kv_heads": int(cfg.get("num_key_value_heads") or heads),
        "head_dim": int(cfg.get("head_dim") or (h // heads if heads else 0)),
        "vocab": int(cfg.get("vocab_size") or 0),
    }


# GGUF metadata keys, ARCH.KEY.
GGUF_KEYS = {"hidden": "embedding_length", "intermediate": "feed_forward_length", "layers": "block_count",
             "heads": "attention.head_count", "kv_heads": "attention.head_count_kv"}


def shape_from_gguf(path):
    """The shape, the licence and the architecture of a GGUF file, from its
    metadata (the gguf package's reader, which maps the file)."""
    import gguf  # noqa: PLC0415 - only for a GGUF model

    r = gguf.GGUFReader(path)

    def val(key):
        f = r.fields.get(key)
        if f is None:
            return None
        v = f.parts[f.data[0]]
        if f.types and f.types[0] == gguf.GGUFValueType.STRING:
            return bytes(v).decode("utf-8", "replace")
        return v.tolist()[0] if hasattr(v, "tolist") else v

    arch = val("general.architecture") or "llama"
    out = {"model_type": arch}
    for k, g in GGUF_KEYS.items():
        x = val("%s.%s" % (arch, g))
        out[k] = int(x) if x is not None else 0
    out["kv_heads"] = out["kv_heads"] or out["heads"]
    out["head_dim"] = out["hidden"] // max(1, out["heads"])
    tok = r.fields.get("tokenizer.ggml.tokens")
    out["vocab"] = len(tok.data) if tok is not None else 0
    return out, val("general.license") or "", arch


def count_params(shape):
    """The decoder's parameters (Llama family: attention with grouped
    key-value heads, a gated MLP, RMS norms; no LM head)."""
    h, i, L = shape["hidden"], shape["intermediate"], shape["layers"]
    q = shape["heads"] * shape["head_dim"]
    kv = shape["kv_heads"] * shape["head_dim"]
    layer = h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h
    return shape["vocab"] * h + L * layer + h


def lora_params(shape, targets, r):
    """The adapter's parameters: r x (in + out) for each targeted layer."""
    h, i = shape["hidden"], shape["intermediate"]
    q = shape["heads"] * shape["head_dim"]
    kv = shape["kv_heads"] * shape["head_dim"]
    dims = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}
    per_layer = sum(r * sum(dims.get(t, (h, h))) for t in targets)
    return shape["layers"] * per_layer


def estimate(shape, quantize, lora_r, targets, n_labels, batch, length, checkpointing, device_type,
             precision="fp32"):
    """The estimate in MiB, by part: a dict of weights, trainable (the
    adapter and head, their gradients, AdamW's state), activations,
    overhead (the CUDA context and the allocator's slack; none on the CPU)
    and total."""
    n = count_params(shape)
    embed = shape["vocab"] * shape["hidden"]
    compute = 4 if precision == "fp32" else 2
    if quantize == "4bit":
        weights = (n - embed) * BITS_4BIT / 8 + embed * compute
    elif quantize == "8bit":
        weights = (n - embed) * (1 + 4.0 / shape["hidden"]) + embed * compute
    else:
        weights = n * compute
    trainable = (lora_params(shape, targets, lora_r) + shape["hidden"] * n_labels) * TRAINABLE_BYTES
    tokens = batch * length
    per_layer = ACT_HIDDEN * shape["hidden"] + ACT_INTER * shape["intermediate"]
    if checkpointing:
        act_elems = tokens * (shape["layers"] * shape["hidden"] * CKPT_HIDDEN + per_layer * CKPT_LAYERS)
    else:
        act_elems = tokens * shape["layers"] * per_layer
    activations = act_elems * compute
    parts = {"weights": weights / MIB, "trainable": trainable / MIB, "activations": activations / MIB}
    body = sum(parts.values())
    parts["overhead"] = (body * (ALLOCATOR_SLACK - 1) + CUDA_CONTEXT_MIB) if device_type == "cuda" else CPU_OVERHEAD_MIB
    parts["total"] = body + parts["overhead"]
    parts["params"] = n
    return parts


def describe(est):
    return "%.0f MiB (weights %.0f, adapter with its gradients and optimizer state %.0f, activations %.0f, %s %.0f)" % (
        est["total"], est["weights"], est["trainable"], est["activations"],
        "CUDA context and allocator" if est["overhead"] > CPU_OVERHEAD_MIB else "allocator", est["overhead"])


def lower_what(params, est):
    """What to lower, by the parts of the estimate that weigh most."""
    out = []
    if est["activations"] >= est["weights"] / 4:
        out.append("--param batch_size=%d (grad_accum keeps the effective batch)" % max(1, params["batch_size"] // 2))
        out.append("--param max_length=N")
        if not params.get("gradient_checkpointing"):
            out.append("--param gradient_checkpointing=true")
    if params.get("quantize") == "none":
        out.append("--param quantize=4bit")
    elif params.get("quantize") == "8bit":
        out.append("--param quantize=4bit")
    out.append("a smaller model")
    return ", ".join(out)


def read_config(model_dir):
    path = os.path.join(model_dir, "config.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def auto_length(max_length):
    """The length the estimate assumes when max_length is left out: the
    cap auto_max_length can reach."""
    return max_length if max_length else 256


def fits(est, free_mib):
    return math.isfinite(free_mib) and est["total"] <= free_mib
