"""Ordinal (likert) schemas: a scale of K points in order is learnt by the
cumulative binary decomposition of Frank and Hall (2001), as tfidf-logreg
learns it. The model has K-1 sigmoid outputs, the k-th P(y > point k),
trained with binary cross-entropy on whether an item's point is above
point k. At prediction the cumulative probabilities are made
non-increasing (each the least of itself and those before it), point k's
probability is P(y > k-1) - P(y > k), the predicted point is the median of
those probabilities (the first point at which their running sum reaches
0.5), and the confidence is the predicted point's probability. Plain
Python: no torch."""

import math


def is_ordinal(schema):
    return schema.get("kind") == "ordinal"


def scale(schema, train_rows):
    """The schema's points in order: its labels (a likert scale's labels,
    or its points "1" to size), else the numbers its train items are
    labelled with, in increasing order."""
    labels = [l for l in (schema.get("labels") or []) if isinstance(l, str) and l]
    if labels:
        return labels
    nums = set()
    for row in train_rows:
        f = _number(row["targets"].get(schema["name"]))
        if f is not None:
            nums.add(f)
    return [_format(f) for f in sorted(nums)]


def point_of(points, target):
    """The index of the point a target (a label's name, or a number)
    names, or None."""
    if isinstance(target, str) and target in points:
        return points.index(target)
    f = _number(target)
    if f is None:
        return None
    for i, l in enumerate(points):
        if _number(l) == f:
            return i
    return None


def thresholds(points):
    """The K-1 outputs' names: ">" and each point but the last."""
    return [">" + l for l in points[:-1]]


def cumulative(point, k):
    """The K-1 binary targets of an item at point (an index)."""
    return [1.0 if point > j else 0.0 for j in range(k - 1)]


def point_probs(cum):
    """The K points' probabilities from the K-1 cumulative ones."""
    out, prev = [], 1.0
    for c in cum:
        c = min(max(c, 0.0), prev)
        out.append(prev - c)
        prev = c
    out.append(prev)
    return out


def median_point(probs):
    total = 0.0
    for k, p in enumerate(probs):
        total += p
        if total >= 0.5 - 1e-12:
            return k
    return len(probs) - 1


def prediction_row(instance_id, schema_name, cum, points):
    """One line of predictions.jsonl for an ordinal schema: the median
    point, its probability as confidence, every point's probability."""
    probs = point_probs(cum)
    k = median_point(probs)
    conf = float(probs[k])
    return {"instance_id": instance_id, "schema_name": schema_name,
            "payload": {"label": points[k], "confidence": conf}, "confidence": conf,
            "probs": {l: float("%.6g" % p) for l, p in zip(points, probs)}}


def _number(v):
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        f = float(v)
    elif isinstance(v, str):
        try:
            f = float(v.strip())
        except ValueError:
            return None
    else:
        return None
    return f if math.isfinite(f) else None


def _format(f):
    return str(int(f)) if f == int(f) else repr(f)
