"""Pretrained models by name or directory, offline first: a directory is
read as it is; a hub name comes from the cache, and is downloaded only
where the hub is switched on and reachable. A model that cannot be had
fails at once with model_unavailable, saying where it was looked for."""

import os
import re
import socket
import sys

from .device import is_oom
from .spec import EXIT_MODEL_UNAVAILABLE, TrainerError


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

