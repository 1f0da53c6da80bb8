"""Unit tests of the fallback tokenizer and the transformers loader with LoRA, against the stand-ins of testdata/standins where the real packages are absent."""

import io
import os
import sys
import tempfile
import time
import unittest

from support import need_torch, spam_bundle, run_main, load_json, predictions, tiny_model, words_of, REAL_HF, STANDINS
from potato_hf import data, events, models, spec


class TestTokenizer(unittest.TestCase):
    def test_hash(self):
        tok = models.HashTokenizer(100)
        ids = tok.encode("The food, the FOOD!", 16)
        self.assertEqual(ids[0], tok.cls_id)
        self.assertEqual(ids[-1], tok.sep_id)
        self.assertEqual(ids[1], ids[4])  # "the" twice
        self.assertEqual(ids[2], ids[5])  # lowercased
        self.assertTrue(all(tok.first <= i < 100 for i in ids[1:-1]))
        self.assertEqual(len(tok.encode("a " * 50, 8)), 8)
        self.assertEqual(tok.settings()["format"], "potato-hash-tokenizer")
        with self.assertRaises(ValueError):
            models.HashTokenizer(6)

    def test_dirs(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "config.json"), "w") as f:
                f.write("{}")
            self.assertFalse(models.has_tokenizer(d))
            self.assertFalse(models.has_weights(d))
            open(os.path.join(d, "vocab.txt"), "w").close()
            open(os.path.join(d, "model.safetensors"), "w").close()
            self.assertTrue(models.has_tokenizer(d))
            self.assertTrue(models.has_weights(d))


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
            _, _, code, evs, err = self.run_tiny(d, {"lora": "true"})
            self.assertEqual(code, 0, err)
            out = os.path.join(d, "work", "model-spam")
            for f in ("adapter_config.json", "adapter_model.bin", "config.json", "vocab.txt", "model_card.json",
                      "labels.json"):
                self.assertTrue(os.path.exists(os.path.join(out, f)), f)
            cfg = load_json(os.path.join(out, "config.json"))
            self.assertEqual((cfg["id2label"], cfg["label2id"]), ({"0": "spam", "1": "ham"}, {"spam": 0, "ham": 1}))
            card = load_json(os.path.join(out, "model_card.json"))
            self.assertEqual(card["lora"]["target_modules"], ["query", "key", "value"])
            self.assertFalse(card["merged"])
            self.assertIn("LoRA on query,key,value (model type bert)", " ".join(e.get("msg", "") for e in evs))

    def test_whole_by_default(self):
        # Without lora, a model this small (well under 150 million
        # parameters) is fine-tuned whole, and the run log says why.
        with tempfile.TemporaryDirectory() as d:
            _, _, code, evs, err = self.run_tiny(d, {})
            self.assertEqual(code, 0, err)
            out = os.path.join(d, "work", "model-spam")
            self.assertFalse(os.path.exists(os.path.join(out, "adapter_config.json")))
            self.assertIsNone(load_json(os.path.join(out, "model_card.json"))["lora"])
            msgs = " ".join(e.get("msg", "") for e in evs)
            self.assertIn("every weight fine-tuned, no LoRA: the model has 0 million parameters, at most 150 million "
                          "(--param lora=true sets it)", msgs)
            self.assertIn(": full fine-tuning, ", msgs)

    def test_merged_loads_alone(self):
        import torch
        import transformers
        with tempfile.TemporaryDirectory() as d:
            splits, _, code, evs, err = self.run_tiny(d, {"lora": "true", "merge": "true"})
            self.assertEqual(code, 0, err)
            out = os.path.join(d, "work", "model-spam")
            self.assertTrue(os.path.exists(os.path.join(out, "adapter", "adapter_config.json")))
            model = transformers.AutoModelForSequenceClassification.from_pretrained(out, torch_dtype=torch.float32)
            tok = transformers.AutoTokenizer.from_pretrained(out)
            self.assertEqual(model.config.id2label, {0: "spam", 1: "ham"})
            row = splits["test"][0]
            card = load_json(os.path.join(out, "model_card.json"))
            # The trainer's cut (model_card.json's truncation): the text's
            # head and tail between [CLS] and [SEP].
            own = tok([row["text"]], add_special_tokens=False)["input_ids"][0]
            ids = [[tok.index[tok.cls_token]] + spec.head_tail(own, card["max_length"] - 2, card["truncation"])
                   + [tok.index[tok.sep_token]]]
            with torch.no_grad():
                logits = model(input_ids=torch.tensor(ids), attention_mask=torch.ones(1, len(ids[0]), dtype=torch.long)).logits
            probs = data.softmax(logits[0].tolist())
            pred = [p for p in predictions(d) if p["instance_id"] == row["instance_id"]][0]
            self.assertEqual(pred["payload"]["label"], ["spam", "ham"][probs.index(max(probs))])
            self.assertAlmostEqual(pred["confidence"], max(probs), places=4)
            self.assertTrue(load_json(os.path.join(out, "model_card.json"))["merged"])

    def test_weights_in_fp32(self):
        import torch
        with tempfile.TemporaryDirectory() as d:
            splits = spam_bundle(d, n=50)
            mdir = tiny_model(os.path.join(d, "m"), vocab_words=words_of(splits))
            params = spec.parse_params({"model": mdir, "lora": "false"})
            import transformers
            loaded = models.load_model(params, ["spam", "ham"], False, {"torch": torch, "transformers": transformers},
                                   {}, events.Events(io.StringIO()), models.TokenizerCache())
            self.assertEqual({p.dtype for p in loaded.model.parameters()}, {torch.float32})

    def test_gpt2_conv1d(self):
        with tempfile.TemporaryDirectory() as d:
            _, _, code, evs, err = self.run_tiny(d, {"lora": "true"}, model_type="gpt2")
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
        with self.assertRaises(spec.TrainerError) as cm:
            models.lora_targets(plain, cfg, None, torch)
        self.assertIn("no linear layer", cm.exception.message)
        m = transformers.AutoModelForSequenceClassification.from_config(cfg)
        with self.assertRaises(spec.TrainerError) as cm:
            models.lora_targets(m, cfg, ["q_lin"], torch)
        self.assertIn("no module named q_lin", cm.exception.message)
        odd = transformers.PretrainedConfig(model_type="distilbert")  # the table's q_lin is absent
        self.assertEqual(models.lora_targets(m, odd, None, torch)[0], ["query", "value"])


    def test_head_learning_rate(self):
        """The new head learns at head_learning_rate, the rest at
        learning_rate: with the rest's rate next to nothing, the saved head
        has moved from the checkpoint's and nothing else has (the
        adapters, which start at zero, or, fine-tuning it all, the
        encoder)."""
        import torch
        for lora in ("true", "false"):
            with tempfile.TemporaryDirectory() as d:
                _, mdir, code, evs, err = self.run_tiny(d, {"lora": lora, "learning_rate": "1e-7"})
                self.assertEqual(code, 0, err)
                self.assertIn("spam: learning rate 0.01 for the classification head (34 parameters), 1e-07 for the "
                              "other", " ".join(e.get("msg", "") for e in evs))
                out = os.path.join(d, "work", "model-spam")
                saved = torch.load(os.path.join(out, "adapter_model.bin" if lora == "true" else "pytorch_model.bin"))
                start = torch.load(os.path.join(mdir, "pytorch_model.bin"))
                # lora_B starts at zero; lora_A is drawn at random.
                moved = {k: (v.float() - (start[k].float() if k in start else 0)).abs().max().item()
                         for k, v in saved.items() if k in start or "lora_B" in k}
                head = {k: m for k, m in moved.items() if k.startswith("classifier.")}
                rest = {k: m for k, m in moved.items() if not k.startswith("classifier.")}
                self.assertEqual(len(head), 2, moved)
                self.assertTrue(rest, moved)
                self.assertGreater(min(head.values()), 1e-3, (lora, head))
                self.assertLess(max(rest.values()), 1e-4, (lora, rest))

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
class TestLoraTargets(unittest.TestCase):
    """LoRA's targets on a module tree named as transformers names BERT's
    and RoBERTa's: torch alone."""

    def bert_like(self, roberta=False):
        import torch
        nn = torch.nn

        def tree(**kids):
            m = nn.Module()
            for k, v in kids.items():
                m.add_module(k, v)
            return m
        layer = tree(attention=tree(self=tree(query=nn.Linear(4, 4), key=nn.Linear(4, 4), value=nn.Linear(4, 4)),
                                    output=tree(dense=nn.Linear(4, 4))),
                     intermediate=tree(dense=nn.Linear(4, 8)), output=tree(dense=nn.Linear(8, 4)))
        body = tree(encoder=tree(layer=nn.ModuleList([layer])))
        if roberta:
            return tree(roberta=body, classifier=tree(dense=nn.Linear(4, 4), out_proj=nn.Linear(4, 2)))
        body.add_module("pooler", tree(dense=nn.Linear(4, 4)))
        return tree(bert=body, classifier=nn.Linear(4, 2))

    def test_every_encoder_layer(self):
        import types
        import torch
        want = ["query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense"]
        for mt, roberta in (("bert", False), ("roberta", True), ("electra", False)):
            targets, why, conv = models.lora_targets(self.bert_like(roberta), types.SimpleNamespace(model_type=mt),
                                                     None, torch)
            self.assertEqual((targets, why, conv), (want, "model type " + mt, False))
        # What peft adapts of those: the encoder's six linear layers, never
        # the pooler (frozen, as saved with the base model) nor the head.
        m = self.bert_like()
        hit = [n for n, _ in m.named_modules() if any(n == t or n.endswith("." + t) for t in want)]
        self.assertEqual(len(hit), 6, hit)
        self.assertFalse([n for n in hit if "pooler" in n or "classifier" in n], hit)
        # The end of a path names a module, as peft matches it.
        self.assertEqual(models.lora_targets(m, types.SimpleNamespace(model_type="bert"), ["intermediate.dense"],
                                             torch)[0], ["intermediate.dense"])
        with self.assertRaises(spec.TrainerError) as cm:
            models.lora_targets(m, types.SimpleNamespace(model_type="bert"), ["layer.dense"], torch)
        self.assertIn("no module named layer.dense", cm.exception.message)


if __name__ == "__main__":
    unittest.main()


class TestAttentionDropout(unittest.TestCase):
    def test_built_with_the_param_saved_with_its_own(self):
        """The model is built with attention_dropout in its config, and
        both configs, the one given and the model's, keep the model's own;
        a log line says when the two differ."""
        class Config:
            attention_probs_dropout_prob = 0.1
            hidden_dropout_prob = 0.1

        class Model:
            pass

        config, seen = Config(), []

        def build():
            seen.append(config.attention_probs_dropout_prob)
            m = Model()
            m.config = type("Copy", (), {"attention_probs_dropout_prob": 0.0})()
            return m
        out = io.StringIO()
        model = models.with_attention_dropout(config, 0.0, events.Events(out), build)
        self.assertEqual(seen, [0.0])
        self.assertEqual((config.attention_probs_dropout_prob, model.config.attention_probs_dropout_prob), (0.1, 0.1))
        self.assertEqual(config.hidden_dropout_prob, 0.1)
        self.assertIn("attention dropout 0, not the model's 0.1", out.getvalue())
