"""What the unit tests of potato_hf share: the package and the test data on
sys.path, bundles and specs, and main() run in this process. Run the
tests with:

    python3 -m unittest discover -s lib/trainer/hf/python/tests

The parts that need no torch run anywhere; the training loop runs on a real
torch (the CPU is enough) and its tests skip only where torch is absent and
CI is unset: with CI set, a missing torch fails them. Where transformers or
peft are absent, the loader is tested against the stand-ins of
lib/trainer/hf/testdata/standins, which have their call signatures."""

import importlib.util
import io
import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
# lib/trainer/hf/python, which holds potato_hf and the launcher.
PYTHON_DIR = os.path.dirname(HERE)
TESTDATA = os.path.join(os.path.dirname(PYTHON_DIR), "testdata")
sys.path.insert(0, PYTHON_DIR)
sys.path.insert(0, TESTDATA)

import spam_project  # noqa: E402
from potato_hf import events, main as cli, models, spec  # noqa: E402

HAVE_TORCH = importlib.util.find_spec("torch") is not None
REAL_HF = importlib.util.find_spec("transformers") is not None and importlib.util.find_spec("peft") is not None
STANDINS = os.path.join(TESTDATA, "standins")


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
    doc = {"v": 1, "run_id": "r", "trainer": spec.TRAINER,
            "schemas": [{"name": "s", "annotation_type": "radio", "kind": "nominal",
                         "labels": ["pos", "neg"], "source_field": ""}],
            "bundle_dir": d, "workdir": os.path.join(d, "work"), "params": {"epochs": "2"},
            "seed": 0, "limits": {"max_wall_s": 0, "max_ram_mb": 0, "device": "", "num_threads": 0}}
    doc.update(over)
    p = os.path.join(d, "spec.json")
    with open(p, "w") as f:
        json.dump(doc, f)
    return p


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


def run_main(d, params, schemas=(SPAM,), env=None, seed=0, stop_after=None, **over):
    """main() on a spec in d, with the fields over added: (exit code,
    events, stderr). stop_after=N acts as a SIGTERM once N progress events
    have been sent. builtin:ngram runs with 4096 hash buckets unless the
    test names its own: its default 65536 costs each step an optimizer
    update of a table 16 times as large, which the short tier pays in
    every fit, for texts that a few thousand buckets tell apart."""
    if params.get("model") == "builtin:ngram" and "buckets" not in params:
        params = dict(params, buckets="4096")
    p = write_spec(d, schemas=list(schemas), params=params, seed=seed, **over)
    out, err = io.StringIO(), io.StringIO()
    if stop_after is not None:
        real = cli.Stop

        class Early(real):
            n = 0

            def check(self):
                if Early.n >= stop_after:
                    self.requested = True
                real.check(self)
        cli.Stop = Early
        orig = events.Events.progress

        def progress(self, *a, **kw):
            Early.n += 1
            orig(self, *a, **kw)
        events.Events.progress = progress
    try:
        code = cli.main(["--spec", p], out, err, env)
    finally:
        if stop_after is not None:
            cli.Stop, events.Events.progress = real, orig
    return code, [json.loads(l) for l in out.getvalue().splitlines()], err.getvalue()


def load_json(path):
    with open(path) as f:
        return json.load(f)


def predictions(d):
    with open(os.path.join(d, "work", "predictions.jsonl")) as f:
        return [json.loads(l) for l in f]


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
            out.update(models.NgramFeaturizer.WORD.findall(r["text"].lower()))
    return out
