"""Learning curves (potato-events(5), CURVES): the points of spec.json's
curve, the nested share of the train split each point fits, in the order
every trainer takes them (lib/curve's Order and Size), and the prediction
lines, of the test split alone, tagged with the point. Plain Python."""

import hashlib
import json
import math

from .spec import EXIT_BAD_SPEC, TrainerError

MAX_POINTS = 20
# lib/curve's MaxDraws.
MAX_DRAWS = 20


def check_points(points):
    """Refuses points that are not a curve: 2 to MAX_POINTS numbers in
    (0, 100], rising."""
    ok = isinstance(points, list) and 2 <= len(points) <= MAX_POINTS and all(
        isinstance(p, (int, float)) and not isinstance(p, bool) and 0 < p <= 100 for p in points)
    if ok and all(b > a for a, b in zip(points, points[1:])):
        return
    raise TrainerError(EXIT_BAD_SPEC, "bad_spec",
                       "curve %r: give 2 to %d rising percentages of the train split in (0, 100]" % (points, MAX_POINTS))


def check_draws(draws):
    """spec.json's curve_draws: absent or 0 is one draw; else 1 to
    MAX_DRAWS, as lib/curve's CheckDraws."""
    if draws in (None, 0):
        return 1
    if isinstance(draws, int) and not isinstance(draws, bool) and 1 <= draws <= MAX_DRAWS:
        return draws
    raise TrainerError(EXIT_BAD_SPEC, "bad_spec", "curve_draws: a curve has 1 to %d draws, not %r" % (MAX_DRAWS, draws))


def draw_seed(seed, d):
    """The seed whose order draw d takes: seed + d (lib/curve's DrawSeed)."""
    return seed + d


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
    with curve_point, curve_draw and n_train; counts them in written."""

    def __init__(self, f, point, n_train, test_ids, draw=0):
        self.f, self.point, self.n_train, self.test_ids = f, point, n_train, test_ids
        self.draw = draw
        self.written = 0

    def write(self, line):
        row = json.loads(line)
        if row["instance_id"] not in self.test_ids:
            return
        row["curve_point"] = self.point
        row["curve_draw"] = self.draw
        row["n_train"] = self.n_train
        self.f.write(json.dumps(row, separators=(",", ":"), ensure_ascii=False) + "\n")
        self.written += 1
