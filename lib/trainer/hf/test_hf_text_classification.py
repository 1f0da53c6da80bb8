"""Unit tests of the hf-text-classification trainer. Run with:
python3 -m unittest discover -s lib/trainer/hf

The parts that need no torch run anywhere; the training loop runs on a real
torch (the CPU is enough) and its tests skip only where torch is absent and
CI is unset: with CI set, a missing torch fails them. Where transformers or
peft are absent, the loader is tested against the stand-ins of
testdata/standins, which have their call signatures."""

import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest
import weakref

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "testdata"))

import hf_text_classification as hf  # noqa: E402
import spam_project  # noqa: E402

HAVE_TORCH = importlib.util.find_spec("torch") is not None
REAL_HF = importlib.util.find_spec("transformers") is not None and importlib.util.find_spec("peft") is not None
STANDINS = os.path.join(HERE, "testdata", "standins")


def need_torch(cls):
    if HAVE_TORCH:
        return cls
    if os.environ.get("CI"):
        raise RuntimeError("CI is set and %s has no torch: scripts/install-deps installs it" % sys.executable)
    return unittest.skip("torch is not installed for %s" % sys.executable)(cls)


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
        self.assertEqual((hf.parse_params({})["epochs"], hf.parse_params({})["batch_size"]), (3, 16))
        b = hf.parse_params({"model": "builtin:ngram"})
        self.assertEqual((b["learning_rate"], b["epochs"], b["batch_size"], b["merge"]), (0.01, 8, 32, False))
        self.assertEqual(hf.needed_packages(b), ("torch",))
        self.assertEqual(hf.needed_packages(hf.parse_params({"lora": "false"})), ("torch", "transformers"))
        self.assertEqual(hf.needed_packages(hf.parse_params({})), ("torch", "transformers", "peft", "jinja2"))
        for bad in ({"epochs": "many"}, {"epochs": "0"}, {"lora": "maybe"}, {"learning_rate": "-1"},
                    {"precision": "fp8"}, {"threshold": "1"}, {"learning_rate": "nan"},
                    {"model": "builtin:bert"}, {"buckets": "3"}, {"max_grad_norm": "-1"}):
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
        self.assertEqual(hf.missing_packages(lambda n: object() if n in have else None, ("torch",)), [])


class TestPrecision(unittest.TestCase):
    def test_choose(self):
        cases = [("auto", "cpu", None, "fp32", False), ("bf16", "cpu", None, "fp32", True),
                 ("auto", "mps", None, "fp32", False),
                 ("auto", "cuda", (8, 0), "bf16", False), ("auto", "cuda", (9, 0), "bf16", False),
                 ("auto", "cuda", (7, 5), "fp16", False), ("bf16", "cuda", (7, 0), "fp16", True),
                 ("fp16", "cuda", (8, 6), "fp16", False), ("fp32", "cuda", (8, 0), "fp32", False)]
        for req, dev, cap, want, warns in cases:
            got, warn = hf.choose_precision(req, dev, cap)
            self.assertEqual((got, bool(warn)), (want, warns), (req, dev, cap))

    def test_grad_scaler(self):
        class S:
            def __init__(self, *a):
                self.args = a
        new = type("T", (), {"amp": type("A", (), {"GradScaler": S}), "cuda": None})
        self.assertEqual(hf.grad_scaler(new).args, ("cuda",))
        old = type("T", (), {"amp": type("A", (), {}), "cuda": type("C", (), {"amp": type("A", (), {"GradScaler": S})})})
        self.assertEqual(hf.grad_scaler(old).args, ())

    def test_clamp(self):
        cfg = type("C", (), {"max_position_embeddings": 514, "model_type": "roberta"})
        self.assertEqual(hf.clamp_max_length(1024, cfg)[0], 512)
        self.assertIn("max_position_embeddings", hf.clamp_max_length(1024, cfg)[1])
        self.assertEqual(hf.clamp_max_length(128, cfg), (128, ""))
        self.assertEqual(hf.clamp_max_length(300, type("C", (), {}), 256)[0], 256)
        self.assertEqual(hf.clamp_max_length(300, type("C", (), {}), 10 ** 30)[0], 300)


class TestOffline(unittest.TestCase):
    def test_paths_and_cache(self):
        self.assertTrue(hf.looks_like_path("/models/bert"))
        self.assertTrue(hf.looks_like_path("./bert"))
        self.assertFalse(hf.looks_like_path("org/bert"))
        self.assertFalse(hf.looks_like_path("bert"))
        self.assertEqual(hf.hub_cache_dir({"HF_HOME": "/h"}), "/h/hub")
        self.assertTrue(hf.is_offline({"HF_HUB_OFFLINE": "1"}))
        self.assertFalse(hf.is_offline({}))

    def test_fails_fast(self):
        calls = []

        def fn(name, local_files_only=False, **kw):
            calls.append(local_files_only)
            raise OSError("not cached")
        for env, reach in (({"HF_HUB_OFFLINE": "1", "HF_HOME": "/data/hf"}, None),
                           ({"HF_HOME": "/data/hf"}, lambda e: (False, "no route to the hub"))):
            calls.clear()
            with self.assertRaises(hf.TrainerError) as cm:
                hf.pretrained(fn, "org/absent", env, reachable=reach or (lambda e: self.fail("reached out")))
            e = cm.exception
            self.assertEqual((e.code, e.exit_code), ("model_unavailable", 3))
            self.assertIn("/data/hf/hub", e.message)
            self.assertIn("org/absent", e.message)
            self.assertEqual(calls, [True], "only the cache is tried")
        with self.assertRaises(hf.TrainerError) as cm:
            hf.pretrained(fn, "/no/such/model", {})
        self.assertIn("/no/such/model is not a directory", cm.exception.message)


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
            self.skipTest("torch, transformers and peft are installed: nothing is missing")
        out, err = io.StringIO(), io.StringIO()
        with tempfile.TemporaryDirectory() as d:
            write_bundle(d, {"train": []})
            code = hf.main(["--spec", write_spec(d)], out, err)
        self.assertEqual(code, 3)
        ev = json.loads(out.getvalue().splitlines()[-1])
        self.assertEqual(ev["code"], "missing_dependency")
        self.assertEqual(ev["message"], "Trainer 'hf-text-classification' could not be imported")
        self.assertTrue(ev["install_hint"].startswith("pip install "))



# ---------------------------------------------------------------- the real loop, on torch


def spam_bundle(d, n=600, seed=3, topics=False, empty=0):
    """A bundle of the spam project's emails: 60% train, 20% val, 10% test,
    10% unlabeled; the first `empty` texts are empty."""
    rng = spam_project.random.Random(seed)
    tops = sorted(spam_project.TOPICS)
    rows = []
    for i in range(n):
        spam = rng.random() < 0.4
        t = sorted(rng.sample(tops, rng.choice((1, 2)))) if topics else []
        text = "" if i < empty else spam_project.email(rng, spam, t)
        targets = {"spam": "spam" if spam else "ham"}
        if topics:
            targets["topics"] = t
        rows.append({"instance_id": "e%d" % i, "text": text, "targets": targets})
    cut = [int(n * f) for f in (0.6, 0.8, 0.9)]
    splits = {"train": rows[:cut[0]], "val": rows[cut[0]:cut[1]], "test": rows[cut[1]:cut[2]],
              "unlabeled": [dict(r, targets={}) for r in rows[cut[2]:]]}
    write_bundle(d, splits)
    return splits


SPAM = {"name": "spam", "annotation_type": "radio", "kind": "nominal", "labels": ["spam", "ham"], "source_field": ""}
TOPICS = {"name": "topics", "annotation_type": "multiselect", "kind": "multilabel",
          "labels": sorted(spam_project.TOPICS), "source_field": ""}


def run_main(d, params, schemas=(SPAM,), env=None, seed=0, stop_after=None):
    """main() on a spec in d: (exit code, events, stderr). stop_after=N
    acts as a SIGTERM once N progress events have been sent."""
    p = write_spec(d, schemas=list(schemas), params=params, seed=seed)
    out, err = io.StringIO(), io.StringIO()
    if stop_after is not None:
        real = hf.Stop

        class Early(real):
            n = 0

            def check(self):
                if Early.n >= stop_after:
                    self.requested = True
                real.check(self)
        hf.Stop = Early
        orig = hf.Events.progress

        def progress(self, *a, **kw):
            Early.n += 1
            orig(self, *a, **kw)
        hf.Events.progress = progress
    try:
        code = hf.main(["--spec", p], out, err, env)
    finally:
        if stop_after is not None:
            hf.Stop, hf.Events.progress = real, orig
    return code, [json.loads(l) for l in out.getvalue().splitlines()], err.getvalue()


def load_json(path):
    with open(path) as f:
        return json.load(f)


def predictions(d):
    with open(os.path.join(d, "work", "predictions.jsonl")) as f:
        return [json.loads(l) for l in f]


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
            hf.check_versions(names, lookup(have))
        for have, want in (
                ({"torch": "1.12.1", "transformers": "4.49.0", "peft": "0.21.0"}, "torch 1.12.1 is older than 1.13"),
                ({"torch": "2.1.0", "transformers": "4.30.2", "peft": "0.5.0"},
                 "transformers 4.30.2 is older than 4.49; peft 0.5.0 is older than 0.21"),
                ({"torch": "1.13.0a0", "transformers": "4.55.0", "peft": "0.21.2"},
                 "transformers 4.55.0 needs torch 2.0 or newer, and torch is 1.13.0a0")):
            with self.assertRaises(hf.TrainerError) as cm:
                hf.check_versions(names, lookup(have))
            e = cm.exception
            self.assertEqual((e.exit_code, e.code), (hf.EXIT_MISSING_DEPENDENCY, "missing_dependency"))
            self.assertIn(want, e.message)
            self.assertIn("it needs torch 1.13 or newer, transformers 4.49 or newer", e.message)
            self.assertIn("torch %s" % have["torch"], e.message)

    def test_stop_leaves_no_model(self):
        """A run stopped once the first schema's model is saved (as by a
        cancel between schemas) leaves no model, whole or partial, in
        artifacts/, and sends no artifact event."""
        real = hf.fit_schema
        calls = []

        def second_stops(*a, **kw):
            if calls:
                raise hf.Cancelled()
            calls.append(1)
            return real(*a, **kw)
        hf.fit_schema = second_stops
        try:
            with tempfile.TemporaryDirectory() as d:
                spam_bundle(d, n=200, topics=True)
                code, evs, err = run_main(d, {"model": "builtin:ngram", "epochs": "1"}, schemas=(SPAM, TOPICS))
                self.assertEqual(code, 4, err)
                self.assertEqual(calls, [1])
                self.assertEqual(sorted(os.listdir(os.path.join(d, "work"))), [])
                self.assertNotIn("artifact", [e["event"] for e in evs])
        finally:
            hf.fit_schema = real

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
        real = hf.load_model

        def spy(*a, **kw):
            import gc
            gc.collect()
            alive = [r for r in seen if r() is not None]
            self.assertEqual(alive, [], "the previous schema's model is still alive")
            loaded = real(*a, **kw)
            seen.append(weakref.ref(loaded.model))
            return loaded
        hf.load_model = spy
        try:
            with tempfile.TemporaryDirectory() as d:
                spam_bundle(d, n=200, topics=True)
                code, _, err = run_main(d, {"model": "builtin:ngram", "epochs": "1"}, schemas=(SPAM, TOPICS))
        finally:
            hf.load_model = real
        self.assertEqual(code, 0, err)
        self.assertEqual(len(seen), 2)

    def test_batches_never_zero_width(self):
        import torch
        b = list(hf.batches(torch, torch.device("cpu"), [[], []], [0, 1], 2, 0))
        _, inp, att = b[0]
        self.assertEqual(tuple(inp.shape), (2, 1))
        self.assertEqual(hf.NgramFeaturizer(64).encode(""), [1])


def tiny_model(d, model_type="bert", vocab_words=(), max_pos=64, weights=True, tokenizer=True):
    """A stand-in checkpoint: config.json, vocab.txt and fp16 weights."""
    sys.path.insert(0, STANDINS) if STANDINS not in sys.path else None
    import torch
    import transformers
    os.makedirs(d, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"] + sorted(set(vocab_words))
    cfg = transformers.PretrainedConfig(model_type=model_type, vocab_size=len(vocab), hidden_size=16,
                                        max_position_embeddings=max_pos, pad_token_id=0)
    cfg.save_pretrained(d)
    if tokenizer:
        transformers.WordTokenizer(vocab).save_pretrained(d)
    if weights:
        m = transformers.AutoModelForSequenceClassification.from_config(cfg)
        torch.save({k: v.half() for k, v in m.state_dict().items()}, os.path.join(d, "pytorch_model.bin"))
    return d


def words_of(splits):
    out = set()
    for rows in splits.values():
        for r in rows:
            out.update(hf.NgramFeaturizer.WORD.findall(r["text"].lower()))
    return out


@need_torch
class TestTransformersLoader(unittest.TestCase):
    """The transformers and peft path. Where the real packages are absent
    (CI), the stand-ins of testdata/standins take their place."""

    @classmethod
    def setUpClass(cls):
        if not REAL_HF and STANDINS not in sys.path:
            sys.path.insert(0, STANDINS)

    def setUp(self):
        if REAL_HF:
            self.skipTest("the stand-ins' checkpoints are not real transformers checkpoints")

    def run_tiny(self, d, params, model_type="bert", max_pos=64, env=None, **kw):
        splits = spam_bundle(d, n=300)
        mdir = tiny_model(os.path.join(d, "m"), model_type, words_of(splits), max_pos, **kw)
        p = {"model": mdir, "epochs": "3", "learning_rate": "0.01"}
        p.update(params)
        code, evs, err = run_main(d, p, env=env or {})
        return splits, mdir, code, evs, err

    def test_lora_artifact(self):
        with tempfile.TemporaryDirectory() as d:
            _, _, code, evs, err = self.run_tiny(d, {})
            self.assertEqual(code, 0, err)
            out = os.path.join(d, "work", "model-spam")
            for f in ("adapter_config.json", "adapter_model.bin", "config.json", "vocab.txt", "model_card.json",
                      "labels.json"):
                self.assertTrue(os.path.exists(os.path.join(out, f)), f)
            cfg = load_json(os.path.join(out, "config.json"))
            self.assertEqual((cfg["id2label"], cfg["label2id"]), ({"0": "spam", "1": "ham"}, {"spam": 0, "ham": 1}))
            card = load_json(os.path.join(out, "model_card.json"))
            self.assertEqual(card["lora"]["target_modules"], ["query", "value"])
            self.assertFalse(card["merged"])
            self.assertIn("LoRA on query,value", " ".join(e.get("msg", "") for e in evs))

    def test_merged_loads_alone(self):
        import torch
        import transformers
        with tempfile.TemporaryDirectory() as d:
            splits, _, code, evs, err = self.run_tiny(d, {"merge": "true"})
            self.assertEqual(code, 0, err)
            out = os.path.join(d, "work", "model-spam")
            self.assertTrue(os.path.exists(os.path.join(out, "adapter", "adapter_config.json")))
            model = transformers.AutoModelForSequenceClassification.from_pretrained(out, torch_dtype=torch.float32)
            tok = transformers.AutoTokenizer.from_pretrained(out)
            self.assertEqual(model.config.id2label, {0: "spam", 1: "ham"})
            row = splits["test"][0]
            card = load_json(os.path.join(out, "model_card.json"))
            ids = tok([row["text"]], truncation=True, max_length=card["max_length"])["input_ids"]
            with torch.no_grad():
                logits = model(input_ids=torch.tensor(ids), attention_mask=torch.ones(1, len(ids[0]), dtype=torch.long)).logits
            probs = hf.softmax(logits[0].tolist())
            pred = [p for p in predictions(d) if p["instance_id"] == row["instance_id"]][0]
            self.assertEqual(pred["payload"]["label"], ["spam", "ham"][probs.index(max(probs))])
            self.assertAlmostEqual(pred["confidence"], max(probs), places=4)
            self.assertTrue(load_json(os.path.join(out, "model_card.json"))["merged"])

    def test_weights_in_fp32(self):
        import torch
        with tempfile.TemporaryDirectory() as d:
            splits = spam_bundle(d, n=50)
            mdir = tiny_model(os.path.join(d, "m"), vocab_words=words_of(splits))
            params = hf.parse_params({"model": mdir, "lora": "false"})
            import transformers
            loaded = hf.load_model(params, ["spam", "ham"], False, {"torch": torch, "transformers": transformers},
                                   {}, hf.Events(io.StringIO()), hf._TokenizerCache())
            self.assertEqual({p.dtype for p in loaded.model.parameters()}, {torch.float32})

    def test_gpt2_conv1d(self):
        with tempfile.TemporaryDirectory() as d:
            _, _, code, evs, err = self.run_tiny(d, {}, model_type="gpt2")
            self.assertEqual(code, 0, err)
            card = load_json(os.path.join(d, "work", "model-spam", "model_card.json"))
            self.assertEqual(card["lora"]["target_modules"], ["c_attn"])

    def test_max_length_clamped(self):
        with tempfile.TemporaryDirectory() as d:
            _, _, code, evs, err = self.run_tiny(d, {"max_length": "512"}, max_pos=16)
            self.assertEqual(code, 0, err)
            self.assertIn("max_length 512 is more than the model's max_position_embeddings 16",
                          " ".join(e.get("msg", "") for e in evs))

    def test_weights_without_tokenizer_refused(self):
        with tempfile.TemporaryDirectory() as d:
            _, mdir, code, evs, _ = self.run_tiny(d, {}, tokenizer=False)
            self.assertEqual((code, evs[-1]["code"]), (3, "model_unavailable"))
            self.assertIn("no tokenizer", evs[-1]["message"])

    def test_config_only_uses_hashing_tokenizer(self):
        with tempfile.TemporaryDirectory() as d:
            _, _, code, evs, err = self.run_tiny(d, {}, tokenizer=False, weights=False)
            self.assertEqual(code, 0, err)
            self.assertTrue(os.path.exists(os.path.join(d, "work", "model-spam", "hash-tokenizer.json")))

    def test_lora_targets(self):
        import torch
        import transformers
        cfg = transformers.PretrainedConfig(model_type="bert")
        plain = torch.nn.Sequential()
        plain.add_module("classifier", torch.nn.Linear(2, 2))
        with self.assertRaises(hf.TrainerError) as cm:
            hf.lora_targets(plain, cfg, None, torch)
        self.assertIn("no linear layer", cm.exception.message)
        m = transformers.AutoModelForSequenceClassification.from_config(cfg)
        with self.assertRaises(hf.TrainerError) as cm:
            hf.lora_targets(m, cfg, ["q_lin"], torch)
        self.assertIn("no module named q_lin", cm.exception.message)
        odd = transformers.PretrainedConfig(model_type="distilbert")  # the table's q_lin is absent
        self.assertEqual(hf.lora_targets(m, odd, None, torch)[0], ["query", "value"])

    def test_offline_hub_name(self):
        with tempfile.TemporaryDirectory() as d:
            spam_bundle(d, n=50)
            home = os.path.join(d, "hf-home")
            env = {"HF_HUB_OFFLINE": "1", "HF_HOME": home}
            old = {k: os.environ.get(k) for k in env}
            os.environ.update(env)  # the stand-in reads the process's environment, as transformers does
            try:
                t = time.time()
                code, evs, _ = run_main(d, {"model": "org/absent-model"}, env=env)
                self.assertLess(time.time() - t, 30)
                self.assertEqual((code, evs[-1]["code"]), (3, "model_unavailable"))
                self.assertIn(os.path.join(home, "hub"), evs[-1]["message"])
                # The same name once in the cache loads offline.
                splits = spam_bundle(d, n=200)
                tiny_model(os.path.join(home, "hub", "models--org--cached-model", "snapshots", "main"),
                           vocab_words=words_of(splits))
                code, evs, err = run_main(d, {"model": "org/cached-model", "epochs": "1"}, env=env)
                self.assertEqual(code, 0, err)
            finally:
                for k, v in old.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v


@need_torch
class TestMissingPackages(unittest.TestCase):
    def test_builtin_needs_torch_alone(self):
        # The interpreter as it is, without the stand-ins on its path.
        if REAL_HF:
            self.skipTest("transformers and peft are installed: nothing is missing")
        with tempfile.TemporaryDirectory() as d:
            spam_bundle(d, n=60)
            code = ("import sys; sys.path.insert(0, %r); import hf_text_classification as hf; "
                    "sys.exit(hf.main(['--spec', %r]))" % (HERE, write_spec(d, schemas=[SPAM], params={})))
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 3, p.stderr)
            evs = [json.loads(l) for l in p.stdout.splitlines()]
            self.assertIn("has no transformers", evs[-2]["msg"])
            self.assertIn("model=distilbert-base-uncased", evs[-2]["msg"])
            self.assertEqual(evs[-1]["code"], "missing_dependency")


if __name__ == "__main__":
    unittest.main()
