"""An ordinal (likert) schema: the cumulative binary decomposition's
pieces, and a fit of the built-in model on the tests' likert corpus of real
tweets (testdata/vader-likert)."""

import json
import os
import tempfile
import unittest

from support import need_torch, run_main, predictions, write_bundle, load_json
from potato_hf import ordinal

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), *[".."] * 5))
POINTS = ["very negative", "negative", "neutral", "positive", "very positive"]
LIKERT = {"name": "sentiment", "annotation_type": "likert", "kind": "ordinal", "labels": POINTS, "source_field": ""}


def point(rating):
    """testdata/vader-likert/README.md's rule, as testproject.LikertPoint."""
    if rating <= -3:
        return 0
    if rating < 0:
        return 1
    if rating == 0:
        return 2
    return 3 if rating <= 2 else 4


def likert_bundle(d):
    """The 1,000 tweets, each with the point of its first rating: 600
    train, 200 val, 200 test."""
    with open(os.path.join(ROOT, "testdata", "vader-likert", "tweets.jsonl"), encoding="utf-8") as f:
        tweets = [json.loads(l) for l in f]
    rows = [{"instance_id": t["id"], "text": t["text"], "targets": {"sentiment": POINTS[point(t["ratings"][0])]}}
            for t in tweets]
    splits = {"train": rows[:600], "val": rows[600:800], "test": rows[800:]}
    write_bundle(d, splits)
    return splits


class TestPieces(unittest.TestCase):
    def test_scale_and_points(self):
        self.assertEqual(ordinal.scale(LIKERT, []), POINTS)
        bare = dict(LIKERT, labels=[])
        rows = [{"targets": {"sentiment": v}} for v in (3, 1.0, "2", None, "x")]
        self.assertEqual(ordinal.scale(bare, rows), ["1", "2", "3"])
        self.assertEqual(ordinal.point_of(["1", "2", "3"], 2.0), 1)
        self.assertEqual(ordinal.point_of(POINTS, "neutral"), 2)
        self.assertIsNone(ordinal.point_of(POINTS, "meh"))
        self.assertEqual(ordinal.cumulative(2, 5), [1.0, 1.0, 0.0, 0.0])
        self.assertEqual(ordinal.thresholds(["a", "b", "c"]), [">a", ">b"])

    def test_probs_and_median(self):
        # 0.3 after 0.2 counts as 0.2: the cumulative probabilities are
        # made non-increasing.
        p = ordinal.point_probs([0.9, 0.2, 0.3, 0.1])
        for got, want in zip(p, [0.1, 0.7, 0.0, 0.1, 0.1]):
            self.assertAlmostEqual(got, want)
        self.assertEqual(ordinal.median_point(p), 1)
        row = ordinal.prediction_row("i", "sentiment", [0.9, 0.2, 0.3, 0.1], POINTS)
        self.assertEqual(row["payload"]["label"], "negative")
        self.assertAlmostEqual(row["confidence"], 0.7)
        self.assertAlmostEqual(sum(row["probs"].values()), 1.0, places=5)


@need_torch
class TestOrdinalFit(unittest.TestCase):
    def test_builtin_learns_the_scale(self):
        """builtin:ngram learns the likert schema of real tweets: every
        prediction is a point with every point's probability, and on the
        test split its points are nearer the gold ones than the most
        common point's."""
        with tempfile.TemporaryDirectory() as d:
            splits = likert_bundle(d)
            code, evs, err = run_main(d, {"model": "builtin:ngram", "epochs": "8", "patience": "-1"}, schemas=(LIKERT,))
            self.assertEqual(code, 0, err)
            r = evs[-1]
            self.assertEqual(r["label_order"]["sentiment"], POINTS)
            gold = {x["instance_id"]: POINTS.index(x["targets"]["sentiment"]) for x in splits["test"]}
            counts = [sum(1 for g in gold.values() if g == k) for k in range(5)]
            mode = counts.index(max(counts))
            err_model = err_mode = 0
            for p in predictions(d):
                self.assertIn(p["payload"]["label"], POINTS)
                self.assertEqual(set(p["probs"]), set(POINTS))
                self.assertAlmostEqual(p["probs"][p["payload"]["label"]], p["confidence"], places=5)
                if p["instance_id"] in gold:
                    g = gold[p["instance_id"]]
                    err_model += abs(POINTS.index(p["payload"]["label"]) - g)
                    err_mode += abs(mode - g)
            self.assertLess(err_model, err_mode, "test MAE %.3f, the most common point's %.3f"
                            % (err_model / len(gold), err_mode / len(gold)))
            card = load_json(os.path.join(d, "work", "model-sentiment", "model_card.json"))
            self.assertEqual(card["kind"], "ordinal")
            self.assertEqual(card["labels"], POINTS)
            self.assertEqual(card["ordinal"]["thresholds"], [">" + l for l in POINTS[:-1]])


if __name__ == "__main__":
    unittest.main()
