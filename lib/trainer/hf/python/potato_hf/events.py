"""The v1 event protocol of potato-events(5): one JSON object per line on
standard output, each written whole and flushed at once, so that the
dispatch, the agent or a terminal reads them as they come."""

import json
import math
import time

from .spec import MODEL_VERSION


def _finite(x):
    """x with every non-finite float made None: JSON has no NaN."""
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

    def __init__(self, stream, model_version=MODEL_VERSION):
        self.stream = stream
        self.model_version = model_version

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
        self.emit("result", status="success", model_version=self.model_version, metrics=metrics,
                  label_order=label_order, predictions_file=predictions_file,
                  n_predictions=n_predictions, **extra)

    def error(self, code, message, hint=""):
        f = {"code": code, "message": message}
        if hint:
            f["install_hint"] = hint
        self.emit("error", **f)

