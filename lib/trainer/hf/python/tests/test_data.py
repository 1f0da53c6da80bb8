"""Unit tests of the bundle, the labels and examples, the prediction rows."""

import json
import os
import tempfile
import unittest

from support import write_bundle
from potato_hf import data, spec


class TestBundle(unittest.TestCase):
    def test_read_and_labels(self):
        with tempfile.TemporaryDirectory() as d:
            write_bundle(d, {
                "train": [{"instance_id": "a", "text": "good", "targets": {"s": "pos"}},
                          {"instance_id": "b", "text": "bad", "targets": {"s": "zzz"}},
                          {"instance_id": "c", "text": "meh", "targets": {"s": "mid"}}],
                "val": [{"instance_id": "v", "text": "fine", "targets": {"s": "neg"}}],
                "unlabeled": [{"instance_id": "u", "text": "who knows"}],
            }, labels={"s": ["extra", "mid", "neg", "pos"]})
            manifest, splits = data.read_bundle(d)
            self.assertEqual(sorted(splits), ["train", "unlabeled", "val"])
            # Splits but train and val stay in their files, read when
            # iterated, as many times as asked.
            self.assertIsInstance(splits["unlabeled"], data.SplitFile)
            self.assertEqual(len(splits["unlabeled"]), 1)
            self.assertEqual(list(splits["unlabeled"]), list(splits["unlabeled"]))
            self.assertEqual(list(splits["unlabeled"])[0]["targets"], {})
            self.assertEqual(splits["val"][0]["instance_id"], "v")
            schema = {"name": "s", "kind": "nominal", "labels": ["pos", "neg"]}
            order = data.label_order(schema, manifest, splits["train"])
            self.assertEqual(order, ["pos", "neg", "extra", "mid", "zzz"])
            ex = data.examples(splits["train"], schema, order)
            self.assertEqual(ex, [("a", "good", 0), ("b", "bad", 4), ("c", "meh", 3)])
            self.assertEqual(data.examples(splits["unlabeled"], schema, order), [])

    def test_bad_line_of_a_file_split(self):
        # A bad line of a split kept in its file fails read_bundle, before
        # any fit, as one of train does.
        with tempfile.TemporaryDirectory() as d:
            write_bundle(d, {"train": [{"instance_id": "a", "text": "t", "targets": {}}],
                             "unlabeled": [{"instance_id": "u", "text": "t"}]})
            with open(os.path.join(d, "unlabeled.jsonl"), "a") as f:
                f.write('{"text": "no id"}\n')
            with self.assertRaises(spec.TrainerError) as cm:
                data.read_bundle(d)
            self.assertIn("unlabeled.jsonl:2: no instance_id", cm.exception.message)

    def test_chunks(self):
        with tempfile.TemporaryDirectory() as d:
            write_bundle(d, {"train": [], "unlabeled": [{"instance_id": str(i), "text": "t"} for i in range(7)]})
            _, splits = data.read_bundle(d)
            got = [[r["instance_id"] for r in c] for c in data.chunks(splits["unlabeled"], 3)]
            self.assertEqual(got, [["0", "1", "2"], ["3", "4", "5"], ["6"]])
            self.assertEqual(list(data.chunks([], 3)), [])

    def test_multilabel_examples(self):
        schema = {"name": "m", "kind": "multilabel", "labels": ["x", "y", "z"]}
        rows = [{"instance_id": "a", "text": "t", "targets": {"m": ["z", "x"]}},
                {"instance_id": "b", "text": "t", "targets": {"m": []}},
                {"instance_id": "c", "text": "t", "targets": {}}]
        self.assertEqual(data.examples(rows, schema, ["x", "y", "z"]),
                         [("a", "t", [1.0, 0.0, 1.0]), ("b", "t", [0.0, 0.0, 0.0])])

    def test_bad_bundle(self):
        with tempfile.TemporaryDirectory() as d:
            write_bundle(d, {"train": []})
            with open(os.path.join(d, "train.jsonl"), "w") as f:
                f.write('{"instance_id": "a"}\nnot json\n')
            with self.assertRaises(spec.TrainerError) as cm:
                data.read_bundle(d)
            self.assertEqual(cm.exception.code, "bad_bundle")
            self.assertIn("train.jsonl:2", cm.exception.message)
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "manifest.json"), "w") as f:
                json.dump({"v": 1, "splits": {"x": {"path": "../x.jsonl"}}}, f)
            with self.assertRaises(spec.TrainerError) as cm:
                data.read_bundle(d)
            self.assertIn("leaves the bundle", cm.exception.message)
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(spec.TrainerError) as cm:
                data.read_bundle(d)
            self.assertEqual(cm.exception.exit_code, 2)


class TestPredictions(unittest.TestCase):
    def test_nominal(self):
        probs = data.softmax([0.0, 2.0, 1.0])
        row = data.prediction_row("i1", "s", probs, ["a", "b", "c"], False)
        self.assertEqual(row["payload"]["label"], "b")
        self.assertAlmostEqual(row["confidence"], probs[1])
        self.assertEqual(row["payload"]["confidence"], row["confidence"])
        self.assertEqual(sorted(row), ["confidence", "instance_id", "payload", "probs", "schema_name"])
        self.assertAlmostEqual(sum(probs), 1.0)
        self.assertEqual(sorted(row["probs"]), ["a", "b", "c"])
        for i, name in enumerate(["a", "b", "c"]):
            self.assertAlmostEqual(row["probs"][name], probs[i], places=5)

    def test_multilabel(self):
        row = data.prediction_row("i1", "m", [0.9, 0.2, 0.6], ["z", "a", "b"], True)
        self.assertEqual(row["payload"]["label"], "b|z")
        self.assertAlmostEqual(row["confidence"], 0.6)
        self.assertEqual(row["probs"], {"z": 0.9, "a": 0.2, "b": 0.6})
        none = data.prediction_row("i2", "m", [0.1, 0.3], ["x", "y"], True)
        self.assertEqual(none["payload"]["label"], "")
        self.assertAlmostEqual(none["confidence"], 0.7)

    def test_sigmoid(self):
        self.assertAlmostEqual(data.sigmoid(0), 0.5)
        self.assertAlmostEqual(data.sigmoid(-1000), 0.0)
        self.assertAlmostEqual(data.sigmoid(1000), 1.0)


if __name__ == "__main__":
    unittest.main()
