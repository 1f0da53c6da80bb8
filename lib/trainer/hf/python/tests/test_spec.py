"""Unit tests of spec.json and the params."""

import tempfile
import unittest

from support import write_spec
from potato_hf import packages, spec


class TestSpec(unittest.TestCase):
    def test_read(self):
        with tempfile.TemporaryDirectory() as d:
            doc = spec.read_spec(write_spec(d, params=None))
            self.assertEqual(doc["params"], {})

    def test_refused(self):
        cases = [({"v": 2}, "bad_spec", "version 2"),
                 ({"trainer": "tfidf-logreg"}, "unknown_trainer", "tfidf-logreg"),
                 ({"schemas": []}, "bad_spec", "no schemas"),
                 ({"workdir": ""}, "bad_spec", "workdir")]
        for over, code, text in cases:
            with tempfile.TemporaryDirectory() as d:
                with self.assertRaises(spec.TrainerError) as cm:
                    spec.read_spec(write_spec(d, **over))
                self.assertEqual((cm.exception.exit_code, cm.exception.code), (2, code), over)
                self.assertIn(text, cm.exception.message)

    def test_missing_file(self):
        with self.assertRaises(spec.TrainerError) as cm:
            spec.read_spec("/nonexistent/spec.json")
        self.assertEqual(cm.exception.exit_code, spec.EXIT_BAD_SPEC)

    def test_params(self):
        p = spec.parse_params({"epochs": "5", "lora": "false", "batch_size": "8", "target_modules": "q, v",
                             "unknown": "x"})
        self.assertEqual((p["epochs"], p["lora"], p["batch_size"], p["target_modules"]), (5, False, 8, ["q", "v"]))
        self.assertEqual((p["learning_rate"], p["head_learning_rate"]), (5e-5, 0.01))
        # Until the model's size chooses LoRA or not and its rate (lora_for,
        # learning_rate_for), the rate of a model fine-tuned whole.
        self.assertEqual((spec.parse_params({})["learning_rate"], spec.parse_params({})["head_learning_rate"]),
                         (5e-5, 0.01))
        self.assertEqual(spec.parse_params({"lora": "true"})["learning_rate"], 1e-3)
        self.assertEqual(spec.parse_params({"head_learning_rate": "0.05"})["head_learning_rate"], 0.05)
        self.assertEqual(spec.parse_params({})["model"], spec.DEFAULT_MODEL)
        self.assertEqual((spec.parse_params({})["epochs"], spec.parse_params({})["batch_size"]), (3, 16))
        # Without the param, enough epochs for about 100 steps, 3 to 10.
        d = spec.parse_params({})
        self.assertEqual([spec.epochs_for(d, n) for n in (91, 200, 350, 534, 5000)], [10, 8, 5, 3, 3])
        self.assertEqual(spec.epochs_for(spec.parse_params({"batch_size": "8"}), 200), 4)
        self.assertEqual(spec.epochs_for(spec.parse_params({"epochs": "2"}), 91), 2)
        self.assertEqual(spec.epochs_for(spec.parse_params({"model": "builtin:ngram"}), 91), 8)
        b = spec.parse_params({"model": "builtin:ngram"})
        self.assertEqual((b["learning_rate"], b["epochs"], b["batch_size"], b["merge"]), (0.01, 8, 32, False))
        self.assertEqual(spec.parse_params({"model": "builtin:ngram", "learning_rate": "0.2"})["head_learning_rate"], 0.2)
        self.assertEqual(packages.needed_packages(b), ("torch",))
        self.assertEqual(packages.needed_packages(spec.parse_params({"lora": "false"})), ("torch", "transformers"))
        self.assertEqual(packages.needed_packages(spec.parse_params({})), ("torch", "transformers", "peft", "jinja2"))
        for bad in ({"epochs": "many"}, {"epochs": "0"}, {"lora": "maybe"}, {"learning_rate": "-1"},
                    {"precision": "fp8"}, {"threshold": "1"}, {"learning_rate": "nan"},
                    {"model": "builtin:bert"}, {"buckets": "3"}, {"max_grad_norm": "-1"},
                    {"head_learning_rate": "0"}, {"head_learning_rate": "inf"}):
            with self.assertRaises(spec.TrainerError) as cm:
                spec.parse_params(bad)
            self.assertEqual(cm.exception.code, "bad_spec")
            self.assertIn("param " + list(bad)[0], cm.exception.message)

    def test_schema_kind(self):
        # A likert schema is learnt (ordinal.py); a slider is not.
        spec.check_schemas({"schemas": [{"name": "x", "kind": "ordinal", "annotation_type": "likert"}]})
        doc = {"schemas": [{"name": "x", "kind": "continuous", "annotation_type": "slider"}]}
        with self.assertRaises(spec.TrainerError) as cm:
            spec.check_schemas(doc)
        self.assertEqual(cm.exception.code, "validation_failed")
        self.assertIn("likert", cm.exception.message)


if __name__ == "__main__":
    unittest.main()
