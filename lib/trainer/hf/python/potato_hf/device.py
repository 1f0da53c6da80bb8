"""Where and how the model trains: the torch device (resolve_device), the
precision (choose_precision, grad_scaler), the seeds, and what counts as
running out of memory."""

import random
import sys


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


def is_oom(torch, e):
    oom = getattr(torch.cuda, "OutOfMemoryError", None) if torch is not None else None
    if oom is not None and isinstance(e, oom):
        return True
    if isinstance(e, MemoryError):
        return True
    text = str(e).lower()
    return isinstance(e, RuntimeError) and ("out of memory" in text or "can't allocate memory" in text)

