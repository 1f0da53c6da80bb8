"""The data: the bundle's manifest and split files, each schema's label
order and its training examples, and the prediction rows written back.
Plain Python: no torch."""

import json
import math
import os

from . import ordinal
from .spec import EXIT_BAD_SPEC, TrainerError


# The splits read_bundle holds in memory: the rows a fit learns and is
# checked on. Every other split (test, unlabeled: the pool to prelabel,
# which may be millions of items) is a SplitFile, read again a chunk at a
# time when it is predicted.
IN_MEMORY_SPLITS = ("train", "val")


def read_bundle(bundle_dir):
    """manifest.json and every split file: (manifest, {split: rows}). A row
    is {instance_id, text, targets}. The splits of IN_MEMORY_SPLITS are
    lists; the others SplitFiles. Every line of every split is checked
    here, before anything is fitted, so a bad line fails the run at once."""
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
        p = os.path.join(bundle_dir, rel)
        if not os.path.exists(p):
            splits[name] = []
        elif name in IN_MEMORY_SPLITS:
            splits[name] = list(split_rows(p))
        else:
            splits[name] = SplitFile(p, sum(1 for _ in split_rows(p)))
    return manifest, splits


def split_rows(path):
    """The rows of a split file, one at a time."""
    base = os.path.basename(path)
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except ValueError as e:
                raise TrainerError(EXIT_BAD_SPEC, "bad_bundle", "%s:%d: %s" % (base, n, e))
            if not isinstance(row, dict) or not isinstance(row.get("instance_id"), str):
                raise TrainerError(EXIT_BAD_SPEC, "bad_bundle", "%s:%d: no instance_id" % (base, n))
            yield {"instance_id": row["instance_id"], "text": row.get("text") or "",
                   "targets": row.get("targets") or {}}


class SplitFile:
    """A split that stays in its file: its rows in file order each time it
    is iterated (split_rows), len the rows read_bundle counted."""

    def __init__(self, path, n):
        self.path, self.n = path, n

    def __len__(self):
        return self.n

    def __iter__(self):
        return split_rows(self.path)


def chunks(rows, size):
    """The rows (a list or a SplitFile) as lists of at most size: at most
    one chunk of a SplitFile is in memory at a time."""
    chunk = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def label_order(schema, manifest, train_rows):
    """The schema's labels as configured, then, sorted, any other label the
    manifest or the training targets name: the model's output order."""
    name = schema["name"]
    if ordinal.is_ordinal(schema):
        # The scale's points, in order: nothing else is a point.
        return ordinal.scale(schema, train_rows)
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
    label index (nominal), a multi-hot list (multilabel) or an ordinal
    schema's cumulative targets (ordinal.py)."""
    name, multi = schema["name"], schema.get("kind") == "multilabel"
    index = {l: i for i, l in enumerate(labels)}
    out = []
    for row in rows:
        t = row["targets"].get(name)
        if ordinal.is_ordinal(schema):
            # The K-1 cumulative targets of the item's point.
            p = ordinal.point_of(labels, t)
            if p is not None:
                out.append((row["instance_id"], row["text"], ordinal.cumulative(p, len(labels))))
            continue
        if multi and isinstance(t, list):
            hot = [0.0] * len(labels)
            for l in t:
                if l in index:
                    hot[index[l]] = 1.0
            out.append((row["instance_id"], row["text"], hot))
        elif not multi and isinstance(t, str) and t in index:
            out.append((row["instance_id"], row["text"], index[t]))
    return out


def prediction_row(instance_id, schema_name, probs, labels, multilabel, threshold=0.5):
    """One line of predictions.jsonl. Nominal: the most probable label and
    its softmax probability. Multilabel: the labels of probability at least
    threshold, sorted, joined by "|", and as confidence the lowest, over all
    labels, of the probability of the choice made for it. probs has every
    label's probability."""
    if multilabel:
        chosen = sorted(l for l, p in zip(labels, probs) if p >= threshold)
        conf = min([p if p >= threshold else 1.0 - p for p in probs] or [1.0])
        label = "|".join(chosen)
    else:
        best = max(range(len(probs)), key=lambda i: probs[i])
        label, conf = labels[best], probs[best]
    conf = float(conf)
    # Every label's probability, to six significant digits, which the
    # dispatch calibrates (potato-events(5), "probs").
    every = {l: float("%.6g" % p) for l, p in zip(labels, probs)}
    return {"instance_id": instance_id, "schema_name": schema_name,
            "payload": {"label": label, "confidence": conf}, "confidence": conf,
            "probs": every}


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

