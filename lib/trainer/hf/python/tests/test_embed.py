"""embed-logreg (potato_hf.embed): its params, its ordinal levels and
targets, its heads against scikit-learn's own predictions, and whole runs
on a small BERT of random weights where transformers is installed. The
heads need numpy and scikit-learn; the runs torch and transformers too."""

import importlib.util
import io
import json
import os
import tempfile
import unittest

from support import SPAM, STANDINS, TOPICS, load_json, spam_bundle

from potato_hf import embed, spec

HAVE_SK = importlib.util.find_spec("sklearn") is not None and importlib.util.find_spec("numpy") is not None


def real(name):
    """Whether name is installed, not one of the stand-ins of testdata."""
    found = importlib.util.find_spec(name)
    return found is not None and not (found.origin or "").startswith(STANDINS)


REAL_TRANSFORMERS = real("transformers") and real("torch") and HAVE_SK


def need_sklearn(cls):
    if HAVE_SK:
        return cls
    if os.environ.get("CI"):
        raise RuntimeError("CI is set and there is no scikit-learn: scripts/install-deps installs it")
    return unittest.skip("scikit-learn is not installed")(cls)


class ParamsTest(unittest.TestCase):
    def test_defaults(self):
        p = embed.parse_params({})
        self.assertEqual(p["model"], embed.DEFAULT_MODEL)
        self.assertEqual(p["c"], embed.DEFAULT_C)
        self.assertIsNone(p["max_length"])
        self.assertEqual(embed.parse_params({"c": "0.5", "class_weights": "balanced"})["c"], 0.5)

    def test_bad(self):
        for k, v in (("c", "0"), ("c", "nan"), ("threshold", "1"), ("class_weights", "some"), ("max_iter", "0"),
                     ("batch_size", "x"), ("model", "builtin:ngram")):
            with self.assertRaises(spec.TrainerError, msg="%s=%s" % (k, v)) as cm:
                embed.parse_params({k: v})
            self.assertEqual(cm.exception.exit_code, spec.EXIT_BAD_SPEC)
            self.assertIn("param %s=" % k, cm.exception.message)

    def test_kinds(self):
        embed.check_schemas({"schemas": [SPAM, TOPICS, {"name": "m", "kind": "ordinal", "annotation_type": "likert"}]})
        with self.assertRaises(spec.TrainerError) as cm:
            embed.check_schemas({"schemas": [{"name": "notes", "kind": "other", "annotation_type": "text"}]})
        self.assertIn("schema notes is other (text): embed-logreg learns nominal, multilabel and ordinal",
                      cm.exception.message)


class OrdinalDataTest(unittest.TestCase):
    def test_points_and_targets(self):
        # The scale is the schema's labels in order (ordinal.scale); a
        # target names a point by its label or its number.
        s = {"name": "m", "kind": "ordinal", "labels": ["bad", "ok", "good"]}
        rows = [{"instance_id": "a", "text": "x", "targets": {"m": "good"}},
                {"instance_id": "b", "text": "y", "targets": {"m": "bad"}},
                {"instance_id": "c", "text": "z", "targets": {"m": "great"}},
                {"instance_id": "d", "text": "w", "targets": {}}]
        labels = embed.ordinal.scale(s, rows)
        self.assertEqual(labels, ["bad", "ok", "good"])
        self.assertEqual(embed.targets(rows, s, labels), [("a", "x", 2), ("b", "y", 0)])
        n = {"name": "m", "kind": "ordinal", "labels": ["1", "2", "3", "4", "5"]}
        rows = [{"instance_id": "a", "text": "x", "targets": {"m": 3}},
                {"instance_id": "b", "text": "y", "targets": {"m": "2"}}]
        self.assertEqual(embed.targets(rows, n, n["labels"]), [("a", "x", 2), ("b", "y", 1)])
        self.assertEqual(embed.too_few("ordinal", [("a", "x", 2), ("b", "y", 2)], labels), "at least 2 levels")

    def test_median_row(self):
        row = embed.ordinal_row("i", "m", [0.3, 0.1, 0.25, 0.35], ["1", "2", "3", "4"])
        # P(<= 2) = 0.4, P(<= 3) = 0.65: the median is 3, not the mode 4.
        self.assertEqual(row["payload"]["label"], "3")
        self.assertEqual(set(row["payload"]), {"label", "confidence"})
        self.assertAlmostEqual(row["confidence"], 0.25)
        self.assertEqual(set(row["probs"]), {"1", "2", "3", "4"})


@need_sklearn
class HeadTest(unittest.TestCase):
    def setUp(self):
        import numpy as np
        import sklearn.linear_model
        self.np, self.sk = np, __import__("sklearn")
        self.rng = np.random.RandomState(0)
        self.params = embed.parse_params({"c": "10", "class_weights": "none"})
        self.lr = sklearn.linear_model.LogisticRegression

    def test_nominal_is_sklearns(self):
        np = self.np
        x = self.rng.randn(120, 8)
        y = (x[:, 0] > 0).astype(int) + 2 * (x[:, 1] > 0.5).astype(int)  # labels 0..3 of 5; 4 absent
        labels = ["a", "b", "c", "d", "e"]
        head = embed.fit_head(self.sk, np, "nominal", x, y, labels, self.params)
        ref = self.lr(C=10, max_iter=1000).fit(x, y).predict_proba(x)
        got = head.probs(x)
        self.assertTrue(np.allclose(got[:, :4], ref, atol=1e-6))
        self.assertTrue(np.all(got[:, 4] == 0))
        self.assertTrue(np.allclose(got.sum(axis=1), 1))
        # Saved as numbers, it gives the same probabilities.
        st = json.loads(json.dumps(head.settings()))
        again = embed.Head(np, st["link"], st["labels"], st["columns"], st["weights"], st["bias"])
        self.assertTrue(np.allclose(again.probs(x), got, atol=1e-5))

    def test_binary_nominal_is_sklearns(self):
        np = self.np
        x = self.rng.randn(80, 5)
        y = (x[:, 2] + 0.3 * self.rng.randn(80) > 0).astype(int)
        head = embed.fit_head(self.sk, np, "nominal", x, y, ["ham", "spam"], self.params)
        ref = self.lr(C=10, max_iter=1000).fit(x, y).predict_proba(x)
        self.assertTrue(np.allclose(head.probs(x), ref, atol=1e-6))

    def test_multilabel(self):
        np = self.np
        x = self.rng.randn(100, 6)
        y = np.stack([x[:, 0] > 0, x[:, 1] > 0, np.zeros(100, dtype=bool)], axis=1).astype(int)
        head = embed.fit_head(self.sk, np, "multilabel", x, y, ["p", "q", "never"], self.params)
        p = head.probs(x)
        self.assertGreater(((p[:, :2] >= 0.5) == (y[:, :2] == 1)).mean(), 0.9)
        # A label no train item has: a constant, low probability.
        self.assertTrue(np.allclose(p[:, 2], p[0, 2]))
        self.assertLess(p[0, 2], 0.05)

    def test_ordinal(self):
        np = self.np
        x = self.rng.randn(300, 4)
        latent = x[:, 0] * 2 + 0.3 * self.rng.randn(300)
        y = np.digitize(latent, [-2, -0.7, 0.7, 2])  # levels 0..4
        labels = ["1", "2", "3", "4", "5"]
        head = embed.fit_head(self.sk, np, "ordinal", x, y, labels, self.params)
        p = head.probs(x)
        self.assertEqual(p.shape, (300, 5))
        self.assertTrue(np.allclose(p.sum(axis=1), 1))
        self.assertTrue(np.all(p >= 0))
        acc, mae = embed.scores(np, "ordinal", p, y, 0.5, labels)
        self.assertGreater(acc, 0.7)
        self.assertLess(mae, 0.35)


def tiny_encoder(d, words):
    """A small BERT of random weights, saved with its tokenizer, as
    sentence-transformers saves one: mean pooling, normalised."""
    import transformers
    os.makedirs(d, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(words)
    with open(os.path.join(d, "vocab.txt"), "w") as f:
        f.write("\n".join(vocab) + "\n")
    transformers.BertTokenizerFast(os.path.join(d, "vocab.txt")).save_pretrained(d)
    cfg = transformers.BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=128)
    transformers.BertModel(cfg).save_pretrained(d)
    with open(os.path.join(d, "modules.json"), "w") as f:
        json.dump([{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                   {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
                   {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}], f)
    os.makedirs(os.path.join(d, "1_Pooling"))
    with open(os.path.join(d, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True}, f)
    return d


MOOD = {"name": "mood", "annotation_type": "likert", "kind": "ordinal", "labels": [], "source_field": ""}


@unittest.skipUnless(REAL_TRANSFORMERS, "torch, transformers and scikit-learn are not all installed")
class RunTest(unittest.TestCase):
    def run_main(self, d, params, schemas, **over):
        doc = {"v": 1, "run_id": "r", "trainer": embed.TRAINER, "schemas": list(schemas), "bundle_dir": d,
               "workdir": os.path.join(d, "work"), "params": params, "seed": 0,
               "limits": {"device": "cpu", "num_threads": 1}}
        doc.update(over)
        p = os.path.join(d, "spec.json")
        with open(p, "w") as f:
            json.dump(doc, f)
        out, err = io.StringIO(), io.StringIO()
        code = embed.main(["--spec", p], out, err, {"HF_HUB_OFFLINE": "1"})
        return code, [json.loads(l) for l in out.getvalue().splitlines()], err.getvalue()

    def bundle(self, d):
        splits = spam_bundle(d, n=200, topics=True)
        # A likert schema: the email's length, in four levels.
        for rows in splits.values():
            for r in rows:
                n = len(r["text"].split())
                if r["targets"]:
                    r["targets"]["mood"] = 1 + (n > 40) + (n > 60) + (n > 80)
        from support import write_bundle
        write_bundle(d, splits)
        words = set()
        for rows in splits.values():
            for r in rows:
                words.update(w.lower() for w in r["text"].replace(".", " ").replace(",", " ").split())
        return splits, tiny_encoder(os.path.join(d, "enc"), words)

    def test_run(self):
        with tempfile.TemporaryDirectory() as d:
            splits, enc = self.bundle(d)
            code, evs, err = self.run_main(d, {"model": enc}, [SPAM, TOPICS, MOOD])
            self.assertEqual(code, 0, err + json.dumps(evs[-3:]))
            res = evs[-1]
            self.assertEqual((res["event"], res["model_version"]), ("result", "embed-logreg/1"))
            self.assertEqual(res["label_order"]["mood"], ["1", "2", "3", "4"])
            n_other = sum(len(v) for k, v in splits.items() if k != "train")
            self.assertEqual(res["n_predictions"], 3 * n_other)
            # Every distinct text encoded once, for the three schemas.
            texts = {r["text"] for rows in splits.values() for r in rows}
            self.assertLessEqual(res["metrics"]["encoded_items"], len(texts) + len(splits["test"]) + len(
                splits["unlabeled"]))
            with open(os.path.join(d, "work", "predictions.jsonl")) as f:
                rows = [json.loads(l) for l in f]
            for r in rows:
                if r["schema_name"] == "topics":
                    chosen = [l for l in r["payload"]["label"].split("|") if l]
                    self.assertTrue(all(r["probs"][l] >= 0.5 for l in chosen), r)
                    continue
                self.assertAlmostEqual(sum(r["probs"].values()), 1.0, places=4)
                self.assertEqual(r["probs"][r["payload"]["label"]], float("%.6g" % r["confidence"]))
            moods = [r for r in rows if r["schema_name"] == "mood"]
            # A likert prediction is the line hf-text-classification writes:
            # the point as its label and its confidence, no value.
            self.assertTrue(moods)
            self.assertTrue(all(set(r["payload"]) == {"label", "confidence"} and r["payload"]["label"] in ("1", "2", "3", "4")
                                for r in moods), moods[:3])
            card = load_json(os.path.join(d, "work", "model-mood", "model_card.json"))
            self.assertEqual((card["trainer"], card["kind"], card["pooling"], card["normalize"]),
                             ("embed-logreg", "ordinal", "mean", True))
            head = load_json(os.path.join(d, "work", "model-mood", "head.json"))
            self.assertEqual((head["format"], head["link"], len(head["weights"]), len(head["weights"][0])),
                             ("potato-embed-head", "cumulative", 3, 32))
            self.assertFalse([n for n in os.listdir(os.path.join(d, "work")) if n.startswith(".partial")])

    def test_curve(self):
        with tempfile.TemporaryDirectory() as d:
            splits, enc = self.bundle(d)
            code, evs, err = self.run_main(d, {"model": enc}, [SPAM], curve=[25, 100], curve_draws=3)
            self.assertEqual(code, 0, err + json.dumps(evs[-3:]))
            with open(os.path.join(d, "work", "predictions.jsonl")) as f:
                rows = [json.loads(l) for l in f]
            self.assertEqual(len(rows), len(splits["test"]) * 2 * 3)
            n_train = {(r["curve_point"], r["curve_draw"]): r["n_train"] for r in rows}
            self.assertEqual(sorted(n_train), [(25, 0), (25, 1), (25, 2), (100, 0), (100, 1), (100, 2)])
            self.assertEqual(n_train[(25, 0)], 30)
            self.assertFalse(os.path.exists(os.path.join(d, "work", "model-spam")))

    def test_refusals(self):
        with tempfile.TemporaryDirectory() as d:
            _, enc = self.bundle(d)
            code, evs, _ = self.run_main(d, {"model": enc}, [{"name": "notes", "kind": "other",
                                                              "annotation_type": "text"}])
            self.assertEqual(code, spec.EXIT_BAD_SPEC)
            self.assertEqual(evs[-1]["code"], "validation_failed")
            code, evs, _ = self.run_main(d, {"model": os.path.join(d, "nothing-here")}, [SPAM])
            self.assertEqual(code, spec.EXIT_MISSING_DEPENDENCY)
            self.assertEqual(evs[-1]["code"], "model_unavailable")
            code, evs, _ = self.run_main(d, {"model": enc}, [SPAM], trainer="hf-text-classification")
            self.assertEqual((code, evs[-1]["code"]), (spec.EXIT_BAD_SPEC, "unknown_trainer"))


if __name__ == "__main__":
    unittest.main()
