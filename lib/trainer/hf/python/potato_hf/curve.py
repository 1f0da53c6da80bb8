"""Learning curves (potato-events(5), CURVES): the points of spec.json's
curve, the nested share of the train split each point fits, in the order
every trainer takes them (lib/curve's Order and Size), and the prediction
lines, of the test split alone, tagged with the point. Plain Python."""

import hashlib
import json
import math

from .spec import EXIT_BAD_SPEC, TrainerError

MAX_POINTS = 20


def check_points(points):
    """Refuses points that are not a curve: 2 to MAX_POINTS numbers in
    (0, 100], rising."""
    ok = isinstance(points, list) and 2 <= len(points) <= MAX_POINTS and all(
        isinstance(p, (int, float)) and not isinstance(p, bool) and 0 < p <= 100 for p in points)
    if ok and all(b > a for a, b in zip(points, points[1:])):
        return
    raise TrainerError(EXIT_BAD_SPEC, "bad_spec",
                       "curve %r: give 2 to %d rising percentages of the train split in (0, 100]" % (points, MAX_POINTS))


def order(seed, ids):
    """ids by the hex SHA-256 of "SEED/ID": the same order as any trainer's."""
    return sorted(ids, key=lambda i: (hashlib.sha256(("%d/%s" % (seed, i)).encode("utf-8")).hexdigest(), i))


def size(n, p):
    """How many of n items point p takes: p% of n, rounded half up, at
    least 1 and at most n."""
    return max(1, min(n, int(math.floor(p * n / 100.0 + 0.5))))


def subset(train_ex, seed, p):
    """The examples (instance_id, text, target) point p fits."""
    by_id = {}
    for ex in train_ex:
        by_id[ex[0]] = ex
    ids = order(seed, list(by_id))
    return [by_id[i] for i in ids[:size(len(ids), p)]]


def label(p):
    """A point as the report writes it: 25, 12.5."""
    return ("%d" % p) if float(p) == int(p) else ("%g" % p)


class TaggedFile:
    """Passes on to f the prediction lines of the test items alone, each
    with curve_point and n_train; counts them in written."""

    def __init__(self, f, point, n_train, test_ids):
        self.f, self.point, self.n_train, self.test_ids = f, point, n_train, test_ids
        self.written = 0

    def write(self, line):
        row = json.loads(line)
        if row["instance_id"] not in self.test_ids:
            return
        row["curve_point"] = self.point
        row["n_train"] = self.n_train
        self.f.write(json.dumps(row, separators=(",", ":"), ensure_ascii=False) + "\n")
        self.written += 1
