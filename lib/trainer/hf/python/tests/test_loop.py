"""Unit tests of the fit and predict loop, on a real torch, with the built-in model."""

import os
import tempfile
import unittest
import weakref

from support import need_torch, spam_bundle, SPAM, TOPICS, run_main, load_json, predictions, spam_project
from potato_hf import loop, models, packages, spec


@need_torch
class TestBuiltinLoop(unittest.TestCase):
    def test_run(self):
        with tempfile.TemporaryDirectory() as d:
            splits = spam_bundle(d, empty=5)
            code, evs, err = run_main(d, {"model": "builtin:ngram", "epochs": "6", "patience": "-1",
                                          "learning_rate": "0.03"})
            self.assertEqual(code, 0, err)
            kinds = [e["event"] for e in evs]
            self.assertEqual(kinds[-1], "result")
            self.assertEqual([e["state"] for e in evs if e["event"] == "status"], ["loading", "fitting", "predicting"])
            first = {k: kinds.index(k) for k in ("progress", "metric", "artifact")}
            self.assertLess(first["progress"], first["metric"])
            self.assertLess(first["metric"], first["artifact"])
            self.assertLess(max(i for i, k in enumerate(kinds) if k == "progress"), first["artifact"])
            r = evs[-1]
            m = r["metrics"]
            self.assertGreaterEqual(m["spam/val_accuracy"], 0.85, m)
            self.assertEqual((r["precision"], r["device"]), ("fp32", "cpu"))
            self.assertFalse([k for k in m if k.startswith("precision")], m)
            per_epoch = -(-len(splits["train"]) // 32)
            self.assertEqual(m["steps"], 6 * per_epoch)
            self.assertGreaterEqual(m["steps_per_s"] * m["fit_seconds"], m["steps"] * 0.99)
            preds = predictions(d)
            want = {x["instance_id"] for s in ("val", "test", "unlabeled") for x in splits[s]}
            self.assertEqual({p["instance_id"] for p in preds}, want)
            self.assertEqual(len(preds), r["n_predictions"])
            for p in preds:
                self.assertIn(p["payload"]["label"], ("spam", "ham"))
                self.assertTrue(0.5 <= p["confidence"] <= 1.0)
            card = load_json(os.path.join(d, "work", "model-spam", "model_card.json"))
            self.assertEqual((card["format"], card["labels"], card["label2id"], card["precision"]),
                             ("potato-model-card", ["spam", "ham"], {"spam": 0, "ham": 1}, "fp32"))
            arts = {e["path"] for e in evs if e["event"] == "artifact"}
            self.assertEqual(arts, {"model-spam/" + f for f in
                                    ("labels.json", "model.pt", "model_card.json", "ngram.json")})
            self.assertFalse(os.path.exists(os.path.join(d, "work", "predictions.jsonl.tmp")))

    def test_early_stopping_and_honest_rate(self):
        with tempfile.TemporaryDirectory() as d:
            splits = spam_bundle(d, n=400)
            code, evs, err = run_main(d, {"model": "builtin:ngram", "epochs": "40", "patience": "0",
                                          "learning_rate": "0.05"})
            self.assertEqual(code, 0, err)
            m = evs[-1]["metrics"]
            ran = len([e for e in evs if e["event"] == "metric" and e["split"] == "train"])
            self.assertLess(ran, 40, "no early stop")
            self.assertEqual(m["spam/best_epoch"], ran - 1)
            per_epoch = -(-len(splits["train"]) // 32)
            self.assertEqual(m["steps"], ran * per_epoch, "steps_per_s counts only the steps taken")
            last = [e for e in evs if e["event"] == "progress"][-1]
            self.assertEqual(last["current"], last["total"])
            vloss = [e["value"] for e in evs if e["event"] == "metric" and e["name"] == "spam/loss" and e["split"] == "val"]
            # The best epoch's weights were restored: the final val loss is its.
            self.assertAlmostEqual(m["spam/val_loss"], min(vloss), places=5)

    def test_deterministic(self):
        got = []
        for seed in (7, 7, 8):
            with tempfile.TemporaryDirectory() as d:
                spam_bundle(d, n=300)
                code, _, err = run_main(d, {"model": "builtin:ngram", "epochs": "2"}, seed=seed)
                self.assertEqual(code, 0, err)
                got.append([(p["instance_id"], round(p["confidence"], 6)) for p in predictions(d)])
        self.assertEqual(got[0], got[1], "the same seed gave other predictions")
        self.assertNotEqual(got[0], got[2], "another seed gave the same predictions")

    def test_cancel(self):
        with tempfile.TemporaryDirectory() as d:
            spam_bundle(d, n=300)
            code, evs, _ = run_main(d, {"model": "builtin:ngram", "epochs": "50", "patience": "-1"}, stop_after=3)
            self.assertEqual(code, 4)
            self.assertEqual((evs[-1]["event"], evs[-1]["state"]), ("status", "cancelled"))
            self.assertNotIn("result", [e["event"] for e in evs])
            for f in ("predictions.jsonl", "predictions.jsonl.tmp"):
                self.assertFalse(os.path.exists(os.path.join(d, "work", f)), f)

    def test_check_versions(self):
        def lookup(have):
            def f(name):
                if name not in have:
                    raise LookupError(name)
                return have[name]
            return f
        names = ("torch", "transformers", "peft", "jinja2")
        for have in ({"torch": "1.13.0a0", "transformers": "4.49.0", "peft": "0.21.2", "jinja2": "3.1.2"},
                     {"torch": "2.15.0+cu132", "transformers": "5.23.0", "peft": "0.21.2"},
                     {"torch": "2.0.1"}, {}):
            packages.check_versions(names, lookup(have))
        for have, want in (
                ({"torch": "1.12.1", "transformers": "4.49.0", "peft": "0.21.0"}, "torch 1.12.1 is older than 1.13"),
                ({"torch": "2.1.0", "transformers": "4.30.2", "peft": "0.5.0"},
                 "transformers 4.30.2 is older than 4.49; peft 0.5.0 is older than 0.21"),
                ({"torch": "1.13.0a0", "transformers": "4.55.0", "peft": "0.21.2"},
                 "transformers 4.55.0 needs torch 2.0 or newer, and torch is 1.13.0a0")):
            with self.assertRaises(spec.TrainerError) as cm:
                packages.check_versions(names, lookup(have))
            e = cm.exception
            self.assertEqual((e.exit_code, e.code), (spec.EXIT_MISSING_DEPENDENCY, "missing_dependency"))
            self.assertIn(want, e.message)
            self.assertIn("it needs torch 1.13 or newer, transformers 4.49 or newer", e.message)
            self.assertIn("torch %s" % have["torch"], e.message)

    def test_stop_leaves_no_model(self):
        """A run stopped once the first schema's model is saved (as by a
        cancel between schemas) leaves no model, whole or partial, in
        artifacts/, and sends no artifact event."""
        real = loop.fit_schema
        calls = []

        def second_stops(*a, **kw):
            if calls:
                raise spec.Cancelled()
            calls.append(1)
            return real(*a, **kw)
        loop.fit_schema = second_stops
        try:
            with tempfile.TemporaryDirectory() as d:
                spam_bundle(d, n=200, topics=True)
                code, evs, err = run_main(d, {"model": "builtin:ngram", "epochs": "1"}, schemas=(SPAM, TOPICS))
                self.assertEqual(code, 4, err)
                self.assertEqual(calls, [1])
                self.assertEqual(sorted(os.listdir(os.path.join(d, "work"))), [])
                self.assertNotIn("artifact", [e["event"] for e in evs])
        finally:
            loop.fit_schema = real

    def test_out_of_memory(self):
        # A real allocation failure: 2^40 buckets of 64 floats is more than
        # any address space.
        with tempfile.TemporaryDirectory() as d:
            spam_bundle(d, n=100)
            code, evs, _ = run_main(d, {"model": "builtin:ngram", "buckets": str(1 << 40), "embed_dim": "64"})
            self.assertEqual(code, 5)
            self.assertEqual((evs[-1]["event"], evs[-1]["code"]), ("error", "out_of_memory"))
            self.assertIn("buckets", evs[-1]["message"])
            self.assertFalse(os.path.exists(os.path.join(d, "work", "predictions.jsonl.tmp")))

    def test_multilabel_threshold(self):
        for threshold in ("0.5", "0.8"):
            with tempfile.TemporaryDirectory() as d:
                splits = spam_bundle(d, n=500, topics=True)
                code, evs, err = run_main(d, {"model": "builtin:ngram", "epochs": "3", "threshold": threshold},
                                          schemas=(SPAM, TOPICS))
                self.assertEqual(code, 0, err)
                m = evs[-1]["metrics"]
                val = {r["instance_id"]: sorted(r["targets"]["topics"]) for r in splits["val"]}
                preds = [p for p in predictions(d) if p["schema_name"] == "topics" and p["instance_id"] in val]
                exact = sum(1 for p in preds if sorted(filter(None, p["payload"]["label"].split("|"))) ==
                            val[p["instance_id"]])
                self.assertAlmostEqual(m["topics/val_accuracy"], exact / len(val), places=6,
                                       msg="val accuracy and predictions disagree at threshold " + threshold)
                self.assertEqual(evs[-1]["label_order"]["topics"], sorted(spam_project.TOPICS))

    def test_memory_released_between_schemas(self):
        seen = []
        real = loop.load_model

        def spy(*a, **kw):
            import gc
            gc.collect()
            alive = [r for r in seen if r() is not None]
            self.assertEqual(alive, [], "the previous schema's model is still alive")
            loaded = real(*a, **kw)
            seen.append(weakref.ref(loaded.model))
            return loaded
        loop.load_model = spy
        try:
            with tempfile.TemporaryDirectory() as d:
                spam_bundle(d, n=200, topics=True)
                code, _, err = run_main(d, {"model": "builtin:ngram", "epochs": "1"}, schemas=(SPAM, TOPICS))
        finally:
            loop.load_model = real
        self.assertEqual(code, 0, err)
        self.assertEqual(len(seen), 2)

    def test_batches_never_zero_width(self):
        import torch
        enc = loop.Encoded(torch, torch.device("cpu"), [[], []], 0)
        _, _, inp, att = list(loop.batches(enc, [0, 1], 2))[0]
        self.assertEqual(tuple(inp.shape), (2, 1))
        self.assertEqual(att.tolist(), [[1], [1]])
        self.assertEqual(models.NgramFeaturizer(64).encode(""), [1])

    def test_encoded_batches(self):
        import torch
        ids = [[5, 6, 7], [8], [9, 10], [11, 12, 13, 14]]
        enc = loop.Encoded(torch, torch.device("cpu"), ids, 0)
        got = list(loop.batches(enc, [1, 2, 0, 3], 2))
        self.assertEqual([g[0] for g in got], [[1, 2], [0, 3]])
        self.assertEqual(got[0][1].tolist(), [1, 2])
        # Each batch is as wide as its longest text, padded with pad_id.
        self.assertEqual(got[0][2].tolist(), [[8, 0], [9, 10]])
        self.assertEqual(got[0][3].tolist(), [[1, 0], [1, 1]])
        self.assertEqual(got[1][2].tolist(), [[5, 6, 7, 0], [11, 12, 13, 14]])
        self.assertEqual(got[1][2].dtype, torch.long)
        inp, att = enc.pieces(1, 3)
        self.assertEqual((inp.tolist(), att.tolist()), ([[8, 0], [9, 10]], [[1, 0], [1, 1]]))

    def test_grouped_order(self):
        import random
        gen = random.Random(3)
        lengths = [gen.randint(1, 128) for _ in range(1000)]
        bs = 16
        order = loop.grouped_order(lengths, bs, random.Random(0))
        self.assertEqual(sorted(order), list(range(1000)))
        self.assertEqual(order, loop.grouped_order(lengths, bs, random.Random(0)))
        self.assertNotEqual(order, loop.grouped_order(lengths, bs, random.Random(1)))

        def padded(o):
            return sum(max(lengths[j] for j in o[i:i + bs]) * len(o[i:i + bs]) for i in range(0, len(o), bs))
        shuffled = list(range(1000))
        random.Random(0).shuffle(shuffled)
        # Batches of about one length: little padding, where a shuffled
        # order pads most texts to about the longest.
        self.assertLess(padded(order), 1.1 * sum(lengths))
        self.assertGreater(padded(shuffled), 1.5 * sum(lengths))
        # Cut into batches of bs, the order cuts along the groups: each
        # batch is of one sorted run, and the short one is last.
        runs = {j: i // (50 * bs) for i, j in enumerate(shuffled)}
        for i in range(0, 1000, bs):
            self.assertEqual(len({runs[j] for j in order[i:i + bs]}), 1, i)

    def test_predict_streams_the_splits(self):
        # Predicted a chunk of 7 rows at a time, the predictions are those
        # of the whole split at once, and no chunk is longer.
        got, sizes = [], []
        real_chunks = loop.chunks

        def spy(rows, size):
            for c in real_chunks(rows, size):
                sizes.append(len(c))
                yield c
        for chunk in (loop.PREDICT_CHUNK, 7):
            with tempfile.TemporaryDirectory() as d:
                spam_bundle(d, n=200, empty=3)
                old, loop.PREDICT_CHUNK, loop.chunks = loop.PREDICT_CHUNK, chunk, spy
                try:
                    code, evs, err = run_main(d, {"model": "builtin:ngram", "epochs": "2"})
                finally:
                    loop.PREDICT_CHUNK, loop.chunks = old, real_chunks
                self.assertEqual(code, 0, err)
                self.assertGreater(evs[-1]["metrics"]["predict_items_per_s"], 0)
                # The same up to float rounding: a batch's width may differ.
                got.append(sorted((p["instance_id"], p["payload"]["label"], round(p["confidence"], 6))
                                  for p in predictions(d)))
        self.assertEqual(got[0], got[1])
        self.assertLessEqual(max(sizes[-10:]), 7)
        self.assertGreater(len(got[0]), 7)

    def test_predict_flushes_denormals_on_cpu(self):
        # Inside, a float32 below the normal range is zero; outside, it is
        # as it was; off the CPU nothing is touched.
        import torch
        tiny = torch.tensor([1e-39], dtype=torch.float32)
        self.assertGreater((tiny * 1).item(), 0)
        with loop.flush_denormal(torch, torch.device("cpu")) as on:
            if not on:
                self.skipTest("this CPU cannot flush denormals")
            self.assertEqual((tiny * 1).item(), 0)
        self.assertGreater((tiny * 1).item(), 0)
        with loop.flush_denormal(torch, "cuda:0"):
            self.assertGreater((tiny * 1).item(), 0)


if __name__ == "__main__":
    unittest.main()
