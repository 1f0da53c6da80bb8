"""Unit tests of learning curves: the order and sizes every trainer shares,
and a curve fitted by the loop on a real torch with the built-in model."""

import tempfile
import unittest

from support import need_torch, spam_bundle, run_main, predictions
from potato_hf import curve, spec


class TestShares(unittest.TestCase):
    def test_order_and_size(self):
        # The same items as lib/curve's Order: the hex SHA-256 of "SEED/ID".
        ids = ["a", "b", "c", "d", "e", "f", "g", "h"]
        self.assertEqual(curve.order(7, ids), curve.order(7, list(reversed(ids))))
        self.assertNotEqual(curve.order(7, ids), curve.order(8, ids))
        # lib/curve's TestOrderNested pins the same order.
        self.assertEqual(curve.order(42, ids), ["d", "e", "c", "f", "a", "h", "g", "b"])
        for n, p, want in ((48, 25, 12), (10, 25, 3), (10, 24, 2), (3, 10, 1), (7, 100, 7)):
            self.assertEqual(curve.size(n, p), want, (n, p))
        ex = [(i, "t", 0) for i in ids]
        small, large = curve.subset(ex, 1, 25), curve.subset(ex, 1, 75)
        self.assertEqual(len(small), 2)
        self.assertEqual(large[:2], small)

    def test_points_refused(self):
        for bad in ([50], [50, 50], [0, 100], [50, 101], ["a", 100], [True, 100], list(range(1, 23))):
            with self.assertRaises(spec.TrainerError) as cm:
                curve.check_points(bad)
            self.assertEqual(cm.exception.code, "bad_spec")
        curve.check_points([12.5, 100])


@need_torch
class TestCurveLoop(unittest.TestCase):
    def test_curve(self):
        with tempfile.TemporaryDirectory() as d:
            splits = spam_bundle(d)
            code, evs, err = run_main(d, {"model": "builtin:ngram", "epochs": "3", "learning_rate": "0.03"},
                                      curve=[25, 50, 100])
            self.assertEqual(code, 0, err)
            r = evs[-1]
            self.assertEqual(r["event"], "result")
            preds = predictions(d)
            test = {x["instance_id"] for x in splits["test"]}
            n = len([x for x in splits["train"] if x["targets"].get("spam")])
            got = {}
            for p in preds:
                self.assertIn(p["instance_id"], test)
                got.setdefault(p["curve_point"], set()).add((p["instance_id"], p["n_train"]))
            self.assertEqual(sorted(got), [25, 50, 100])
            for pt, rows in got.items():
                self.assertEqual({i for i, _ in rows}, test)
                self.assertEqual({k for _, k in rows}, {curve.size(n, pt)})
            self.assertEqual(len(preds), r["n_predictions"])
            self.assertFalse([e for e in evs if e["event"] == "artifact"], "a curve keeps no model")
            logs = [e["msg"] for e in evs if e["event"] == "log" and e["msg"].startswith("curve: ")]
            self.assertEqual(len(logs), 3, logs)
