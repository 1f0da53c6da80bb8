"""Unit tests of hf-llm-classification's own parts (llm.py, memory.py):
its params, the quantize refusal, the memory estimate, the licence of a
model card, and the retry at half the batch after an out of memory. The
package is made that trainer for each test and made hf-text-classification
again after it, so that the other tests see the package as it was."""

import io
import json
import os
import tempfile
import unittest

from support import need_torch
from potato_hf import events, llm, memory, spec


class LLMTrainer(unittest.TestCase):
    def setUp(self):
        self.saved = (spec.TRAINER, spec.MODEL_VERSION, spec.PARAMS, spec.EXTEND)
        llm.install()

    def tearDown(self):
        spec.become(*self.saved)


class TestParams(LLMTrainer):
    def test_defaults(self):
        p = spec.parse_params({})
        self.assertEqual(spec.TRAINER, "hf-llm-classification")
        self.assertEqual((p["quantize"], p["mode"], p["grad_accum"], p["batch_size"]), ("none", "fine-tune", 1, 8))
        self.assertEqual(p["model"], "HuggingFaceTB/SmolLM2-135M-Instruct")
        self.assertIsNone(p["gradient_checkpointing"])
        self.assertIn("bitsandbytes", spec.parse_params({"quantize": "4bit"})["packages"])
        self.assertNotIn("bitsandbytes", p["packages"])

    def test_refused(self):
        for raw, what in (({"quantize": "2bit"}, "quantize"), ({"mode": "few-shot"}, "mode"),
                          ({"grad_accum": "0"}, "grad_accum"), ({"model": "builtin:ngram"}, "model"),
                          ({"quantize": "4bit", "lora": "false"}, "lora")):
            with self.assertRaises(spec.TrainerError) as c:
                spec.parse_params(raw)
            self.assertIn("param %s=" % what, c.exception.message)


class TestQuantize(unittest.TestCase):
    def test_refusal(self):
        self.assertEqual(llm.quantize_refusal("none", "cpu", False), "")
        self.assertEqual(llm.quantize_refusal("4bit", "cuda", True), "")
        self.assertEqual(llm.quantize_refusal("4bit", "cpu", True),
                         "quantize=4bit needs bitsandbytes on a CUDA GPU, and this run would train on the CPU: "
                         "set --param quantize=none to train the weights unquantized")
        self.assertIn("bitsandbytes is not installed", llm.quantize_refusal("8bit", "cuda", False))


SMALL = {"model_type": "llama", "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
         "num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152}


class TestMemory(unittest.TestCase):
    def test_parts(self):
        shape = memory.shape_from_config(SMALL)
        self.assertEqual(memory.count_params(shape), 134515008)  # SmolLM2-135M without its LM head
        args = (8, ["q_proj", "v_proj"], 2, 8, 256)
        full = memory.estimate(shape, "none", *args, checkpointing=False, device_type="cuda", precision="bf16")
        ckpt = memory.estimate(shape, "none", *args, checkpointing=True, device_type="cuda", precision="bf16")
        q4 = memory.estimate(shape, "4bit", *args, checkpointing=True, device_type="cuda", precision="bf16")
        self.assertLess(ckpt["activations"], full["activations"] / 4)
        self.assertLess(q4["weights"], ckpt["weights"] / 2)  # the embedding stays in bf16
        self.assertGreater(full["overhead"], memory.CUDA_CONTEXT_MIB)
        self.assertAlmostEqual(full["total"], full["weights"] + full["trainable"] + full["activations"] + full["overhead"])
        self.assertIn("gradient_checkpointing=true", memory.lower_what({"batch_size": 8, "quantize": "none"}, full))
        self.assertIn("quantize=4bit", memory.lower_what({"batch_size": 8, "quantize": "none"}, full))

    def test_card_license(self):
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(llm.card_license(d), "")
            with open(os.path.join(d, "README.md"), "w") as f:
                f.write("---\nlanguage: en\nlicense: 'apache-2.0'\n---\n# Model\nlicense: other\n")
            self.assertEqual(llm.card_license(d), "apache-2.0")


@need_torch
class TestOutOfMemoryRetry(LLMTrainer):
    def test_retry_once_at_half_the_batch(self):
        """A fit that runs out of memory (the loop's out_of_memory error, as
        it raises it on a GPU that ran out) is tried again once at half
        the batch with grad_accum doubled; a second one ends the run."""
        import torch
        import potato_hf.loop as loop
        import potato_hf.packages as packages
        calls = []

        def fit(s, ev, stop, env):
            calls.append(dict(s["params"]))
            raise spec.TrainerError(spec.EXIT_OUT_OF_MEMORY, "out_of_memory", "the GPU cuda:0 ran out of memory")
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump(SMALL, f)
            doc = {"v": 1, "trainer": llm.TRAINER, "schemas": [{"name": "s", "kind": "nominal", "labels": ["a", "b"]}],
                   "bundle_dir": d, "workdir": d, "params": {"model": d, "batch_size": "16"},
                   "limits": {"device": "cpu"}}
            out = io.StringIO()
            real, real_import = loop.train, packages.import_packages
            loop.train = fit
            # transformers and peft are the fit's, which does not run here.
            packages.import_packages = lambda names, why="": tuple(torch if n == "torch" else None for n in names)
            try:
                with self.assertRaises(spec.TrainerError) as c:
                    llm.train(doc, events.Events(out), loop.Stop(), {})
            finally:
                loop.train, packages.import_packages = real, real_import
        self.assertEqual(c.exception.code, "out_of_memory")
        self.assertEqual([(p["batch_size"], p.get("grad_accum")) for p in calls], [("16", None), ("8", "2")])
        logs = [json.loads(l) for l in out.getvalue().splitlines()]
        said = [e["msg"] for e in logs if e.get("event") == "log"]
        self.assertTrue(any("trying once more at batch_size 8 with grad_accum 2, the same effective batch of 16" in m
                            for m in said), said)
        self.assertTrue(any(m.startswith("memory estimate: ") for m in said), said)


if __name__ == "__main__":
    unittest.main()
