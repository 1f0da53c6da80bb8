"""Unit tests of the parts of the hf-text-classification trainer that need
no torch. Run with: python3 -m unittest discover -s lib/trainer/hf"""

import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hf_text_classification as hf  # noqa: E402


def write_bundle(d, rows_by_split, labels=None):
    splits = {}
    for name, rows in rows_by_split.items():
        with open(os.path.join(d, name + ".jsonl"), "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        splits[name] = {"path": name + ".jsonl", "format": "jsonl", "n": len(rows)}
    manifest = {"v": 1, "schemas": [], "splits": splits, "labels": labels or {}, "unknown_field": 3}
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(manifest, f)


def write_spec(d, **over):
    spec = {"v": 1, "run_id": "r", "trainer": hf.TRAINER,
            "schemas": [{"name": "s", "annotation_type": "radio", "kind": "nominal",
                         "labels": ["pos", "neg"], "source_field": ""}],
            "bundle_dir": d, "workdir": os.path.join(d, "work"), "params": {"epochs": "2"},
            "seed": 0, "limits": {"max_wall_s": 0, "max_ram_mb": 0, "device": "", "num_threads": 0}}
    spec.update(over)
    p = os.path.join(d, "spec.json")
    with open(p, "w") as f:
        json.dump(spec, f)
    return p


class TestEvents(unittest.TestCase):
    def test_line(self):
        line = hf.event_line("progress", {"phase": "fit", "current": 3, "total": 30}, t=1796228039.75123)
        self.assertTrue(line.endswith("\n"))
        self.assertTrue(line.startswith('{"v":1,"event":"progress","t":1796228039.751,'))
        obj = json.loads(line)
        self.assertEqual(obj["current"], 3)

    def test_non_finite_is_null(self):
        obj = json.loads(hf.event_line("metric", {"split": "val", "name": "s/loss",
                                                   "value": float("nan"), "step": 1}))
        self.assertIsNone(obj["value"])

    def test_writer(self):
        out = io.StringIO()
        ev = hf.Events(out)
        ev.progress("fit", 1, 4, eta_s=12.345)
        ev.progress("fit", 2, 4)
        ev.error("missing_dependency", "m", "pip install torch")
        ev.result({"s/val_accuracy": 0.5}, {"s": ["pos", "neg"]}, "predictions.jsonl", 7)
        lines = [json.loads(l) for l in out.getvalue().splitlines()]
        self.assertEqual(lines[0]["eta_s"], 12.3)
        self.assertNotIn("eta_s", lines[1])
        self.assertEqual(lines[2], {"v": 1, "event": "error", "t": lines[2]["t"], "code": "missing_dependency",
                                    "message": "m", "install_hint": "pip install torch"})
        r = lines[3]
        self.assertEqual((r["status"], r["predictions_file"], r["n_predictions"], r["label_order"]),
                         ("success", "predictions.jsonl", 7, {"s": ["pos", "neg"]}))
        self.assertEqual(r["model_version"], hf.MODEL_VERSION)


class TestSpec(unittest.TestCase):
    def test_read(self):
        with tempfile.TemporaryDirectory() as d:
            spec = hf.read_spec(write_spec(d, params=None))
            self.assertEqual(spec["params"], {})

    def test_refused(self):
        cases = [({"v": 2}, "bad_spec", "version 2"),
                 ({"trainer": "tfidf-logreg"}, "unknown_trainer", "tfidf-logreg"),
                 ({"schemas": []}, "bad_spec", "no schemas"),
                 ({"workdir": ""}, "bad_spec", "workdir")]
        for over, code, text in cases:
            with tempfile.TemporaryDirectory() as d:
                with self.assertRaises(hf.TrainerError) as cm:
                    hf.read_spec(write_spec(d, **over))
                self.assertEqual((cm.exception.exit_code, cm.exception.code), (2, code), over)
                self.assertIn(text, cm.exception.message)

    def test_missing_file(self):
        with self.assertRaises(hf.TrainerError) as cm:
            hf.read_spec("/nonexistent/spec.json")
        self.assertEqual(cm.exception.exit_code, hf.EXIT_BAD_SPEC)

    def test_params(self):
        p = hf.parse_params({"epochs": "5", "lora": "false", "batch_size": "8", "target_modules": "q, v",
                             "unknown": "x"})
        self.assertEqual((p["epochs"], p["lora"], p["batch_size"], p["target_modules"]), (5, False, 8, ["q", "v"]))
        self.assertEqual(p["learning_rate"], 2e-5)
        self.assertEqual(hf.parse_params({})["learning_rate"], 2e-4)
        self.assertEqual(hf.parse_params({})["model"], hf.DEFAULT_MODEL)
        for bad in ({"epochs": "many"}, {"epochs": "0"}, {"lora": "maybe"}, {"learning_rate": "-1"},
                    {"precision": "fp8"}, {"threshold": "1"}, {"learning_rate": "nan"}):
            with self.assertRaises(hf.TrainerError) as cm:
                hf.parse_params(bad)
            self.assertEqual(cm.exception.code, "bad_spec")
            self.assertIn("param " + list(bad)[0], cm.exception.message)

    def test_schema_kind(self):
        spec = {"schemas": [{"name": "x", "kind": "ordinal", "annotation_type": "likert"}]}
        with self.assertRaises(hf.TrainerError) as cm:
            hf.check_schemas(spec)
        self.assertEqual(cm.exception.code, "validation_failed")


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
            manifest, splits = hf.read_bundle(d)
            self.assertEqual(sorted(splits), ["train", "unlabeled", "val"])
            self.assertEqual(splits["unlabeled"][0]["targets"], {})
            schema = {"name": "s", "kind": "nominal", "labels": ["pos", "neg"]}
            order = hf.label_order(schema, manifest, splits["train"])
            self.assertEqual(order, ["pos", "neg", "extra", "mid", "zzz"])
            ex = hf.examples(splits["train"], schema, order)
            self.assertEqual(ex, [("a", "good", 0), ("b", "bad", 4), ("c", "meh", 3)])
            self.assertEqual(hf.examples(splits["unlabeled"], schema, order), [])

    def test_multilabel_examples(self):
        schema = {"name": "m", "kind": "multilabel", "labels": ["x", "y", "z"]}
        rows = [{"instance_id": "a", "text": "t", "targets": {"m": ["z", "x"]}},
                {"instance_id": "b", "text": "t", "targets": {"m": []}},
                {"instance_id": "c", "text": "t", "targets": {}}]
        self.assertEqual(hf.examples(rows, schema, ["x", "y", "z"]),
                         [("a", "t", [1.0, 0.0, 1.0]), ("b", "t", [0.0, 0.0, 0.0])])

    def test_bad_bundle(self):
        with tempfile.TemporaryDirectory() as d:
            write_bundle(d, {"train": []})
            with open(os.path.join(d, "train.jsonl"), "w") as f:
                f.write('{"instance_id": "a"}\nnot json\n')
            with self.assertRaises(hf.TrainerError) as cm:
                hf.read_bundle(d)
            self.assertEqual(cm.exception.code, "bad_bundle")
            self.assertIn("train.jsonl:2", cm.exception.message)
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "manifest.json"), "w") as f:
                json.dump({"v": 1, "splits": {"x": {"path": "../x.jsonl"}}}, f)
            with self.assertRaises(hf.TrainerError) as cm:
                hf.read_bundle(d)
            self.assertIn("leaves the bundle", cm.exception.message)
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaises(hf.TrainerError) as cm:
                hf.read_bundle(d)
            self.assertEqual(cm.exception.exit_code, 2)


class TestPredictions(unittest.TestCase):
    def test_nominal(self):
        probs = hf.softmax([0.0, 2.0, 1.0])
        row = hf.prediction_row("i1", "s", probs, ["a", "b", "c"], False)
        self.assertEqual(row["payload"]["label"], "b")
        self.assertAlmostEqual(row["confidence"], probs[1])
        self.assertEqual(row["payload"]["confidence"], row["confidence"])
        self.assertEqual(sorted(row), ["confidence", "instance_id", "payload", "schema_name"])
        self.assertAlmostEqual(sum(probs), 1.0)

    def test_multilabel(self):
        row = hf.prediction_row("i1", "m", [0.9, 0.2, 0.6], ["z", "a", "b"], True)
        self.assertEqual(row["payload"]["label"], "b|z")
        self.assertAlmostEqual(row["confidence"], 0.6)
        none = hf.prediction_row("i2", "m", [0.1, 0.3], ["x", "y"], True)
        self.assertEqual(none["payload"]["label"], "")
        self.assertAlmostEqual(none["confidence"], 0.7)

    def test_sigmoid(self):
        self.assertAlmostEqual(hf.sigmoid(0), 0.5)
        self.assertAlmostEqual(hf.sigmoid(-1000), 0.0)
        self.assertAlmostEqual(hf.sigmoid(1000), 1.0)


class TestTokenizer(unittest.TestCase):
    def test_hash(self):
        tok = hf.HashTokenizer(100)
        ids = tok.encode("The food, the FOOD!", 16)
        self.assertEqual(ids[0], tok.cls_id)
        self.assertEqual(ids[-1], tok.sep_id)
        self.assertEqual(ids[1], ids[4])  # "the" twice
        self.assertEqual(ids[2], ids[5])  # lowercased
        self.assertTrue(all(tok.first <= i < 100 for i in ids[1:-1]))
        self.assertEqual(len(tok.encode("a " * 50, 8)), 8)
        self.assertEqual(tok.settings()["format"], "potato-hash-tokenizer")
        with self.assertRaises(ValueError):
            hf.HashTokenizer(6)

    def test_dirs(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "config.json"), "w") as f:
                f.write("{}")
            self.assertFalse(hf.has_tokenizer(d))
            self.assertFalse(hf.has_weights(d))
            open(os.path.join(d, "vocab.txt"), "w").close()
            open(os.path.join(d, "model.safetensors"), "w").close()
            self.assertTrue(hf.has_tokenizer(d))
            self.assertTrue(hf.has_weights(d))


class TestDevice(unittest.TestCase):
    def test_resolve(self):
        cases = [
            # requested, env, cuda_count, mps, want
            ("", {}, 2, False, "cuda:0"),
            ("", {}, 0, True, "mps"),
            ("", {}, 0, False, "cpu"),
            ("auto", {"CUDA_VISIBLE_DEVICES": ""}, 2, False, "cpu"),
            ("cuda:1", {"CUDA_VISIBLE_DEVICES": "1"}, 1, False, "cuda:0"),
            ("cuda:1", {}, 2, False, "cuda:1"),
            ("", {"POTATO_TRAINING_DEVICE": "cpu"}, 2, False, "cpu"),
            ("cpu", {"POTATO_TRAINING_DEVICE": "cuda:0"}, 2, False, "cpu"),
        ]
        for req, env, n, mps, want in cases:
            got, warn = hf.resolve_device(req, env, n, mps)
            self.assertEqual(got, want, (req, env, n, mps))
            self.assertEqual(warn, "")
        got, warn = hf.resolve_device("cuda:0", {}, 0, False)
        self.assertEqual(got, "cpu")
        self.assertIn("not available", warn)
        got, warn = hf.resolve_device("mps", {}, 0, False)
        self.assertEqual(got, "cpu")


class TestDependencies(unittest.TestCase):
    def test_import_error_wording(self):
        msg, hint = hf.import_error(["torch", "transformers", "peft"])
        self.assertEqual(msg, "Trainer 'hf-text-classification' could not be imported")
        self.assertEqual(hint, "pip install torch transformers peft")

    def test_missing(self):
        have = {"torch"}
        self.assertEqual(hf.missing_packages(lambda n: object() if n in have else None), ["transformers", "peft"])


class TestMain(unittest.TestCase):
    def test_bad_spec_exits_2(self):
        out, err = io.StringIO(), io.StringIO()
        with tempfile.TemporaryDirectory() as d:
            code = hf.main(["--spec", write_spec(d, params={"epochs": "x"})], out, err)
        self.assertEqual(code, 2)
        ev = json.loads(out.getvalue().splitlines()[-1])
        self.assertEqual((ev["event"], ev["code"]), ("error", "bad_spec"))

    def test_missing_dependency_exits_3(self):
        if not hf.missing_packages():
            self.skipTest("torch, transformers and peft are installed")
        out, err = io.StringIO(), io.StringIO()
        with tempfile.TemporaryDirectory() as d:
            write_bundle(d, {"train": []})
            code = hf.main(["--spec", write_spec(d)], out, err)
        self.assertEqual(code, 3)
        ev = json.loads(out.getvalue().splitlines()[-1])
        self.assertEqual(ev["code"], "missing_dependency")
        self.assertEqual(ev["message"], "Trainer 'hf-text-classification' could not be imported")
        self.assertTrue(ev["install_hint"].startswith("pip install "))


if __name__ == "__main__":
    unittest.main()
