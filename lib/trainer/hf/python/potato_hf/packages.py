"""The Python packages a run needs: which ones (needed_packages), whether
their versions are in the supported range (check_versions, before any is
imported) and importing them, with SPEC F4's missing_dependency error
when one is absent."""

import importlib
import importlib.metadata
import importlib.util
import re
import sys

from .spec import EXIT_MISSING_DEPENDENCY, TRAINER, TrainerError, is_builtin

# Import names, in the order lib/backend/ssh's TrainerPackages lists them.
PACKAGES = ("torch", "transformers", "peft")
# lib/probe's ImportErrorFormat and InstallHintFormat (SPEC F4).
IMPORT_ERROR = "Trainer '%s' could not be imported"
INSTALL_HINT = "pip install %s"
# The import names whose pip package is named otherwise (lib/probe's pipNames).
PIP_NAMES = {"sklearn": "scikit-learn"}


def needed_packages(params):
    """The import names the run needs: torch alone for a built-in model,
    transformers too for another, and peft for LoRA, with jinja2, without
    which peft's save_pretrained fails as it writes the adapter's model
    card: after the whole fit, were it not checked first. Without
    params.lora, which the model's size decides once it is loaded (spec.
    lora_for), peft is needed as for LoRA, as the Go side's Packages says."""
    if params.get("packages"):
        return tuple(params["packages"])  # another trainer's (spec.become)
    if is_builtin(params["model"]):
        return ("torch",)
    return ("torch", "transformers") if params["lora"] is False else ("torch", "transformers", "peft", "jinja2")


# The oldest versions supported: the oldest stack the tests run
# (requirements/hf-debian.txt, Debian 12's torch). Transformers from 4.50
# on import torch.distributed.tensor, which torch 2 brought.
MIN_VERSIONS = (("torch", (1, 13)), ("transformers", (4, 49)), ("peft", (0, 21)))
TRANSFORMERS_NEEDS_TORCH2 = (4, 50)
SUPPORTED = ("torch 1.13 or newer, transformers 4.49 or newer (4.50 and later need torch 2) "
             "and, for LoRA, peft 0.21 or newer")


def release(v):
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
        if name in found and release(found[name]) < least:
            wrong.append("%s %s is older than %d.%d" % (name, found[name], least[0], least[1]))
    if ("transformers" in found and "torch" in found and release(found["transformers"]) >= TRANSFORMERS_NEEDS_TORCH2
            and release(found["torch"]) < (2, 0)):
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


def import_error(missing, trainer=TRAINER):
    """SPEC F4, worded as lib/probe's ImportError: (message, install hint)."""
    return IMPORT_ERROR % trainer, (INSTALL_HINT % " ".join(PIP_NAMES.get(m, m) for m in missing) if missing else "")


def import_packages(names=PACKAGES, why="", trainer=TRAINER):
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
    msg, hint = import_error(missing, trainer)
    e = TrainerError(EXIT_MISSING_DEPENDENCY, "missing_dependency", msg, hint)
    e.detail = detail
    raise e

