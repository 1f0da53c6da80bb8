"""Unit tests of the device and the precision."""

import unittest

import support  # noqa: F401 - puts potato_hf on the path
from potato_hf import device, models


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
            got, warn = device.resolve_device(req, env, n, mps)
            self.assertEqual(got, want, (req, env, n, mps))
            self.assertEqual(warn, "")
        got, warn = device.resolve_device("cuda:0", {}, 0, False)
        self.assertEqual(got, "cpu")
        self.assertIn("not available", warn)
        got, warn = device.resolve_device("mps", {}, 0, False)
        self.assertEqual(got, "cpu")


class TestPrecision(unittest.TestCase):
    def test_choose(self):
        cases = [("auto", "cpu", None, "fp32", False), ("bf16", "cpu", None, "fp32", True),
                 ("auto", "mps", None, "fp32", False),
                 ("auto", "cuda", (8, 0), "bf16", False), ("auto", "cuda", (9, 0), "bf16", False),
                 ("auto", "cuda", (7, 5), "fp16", False), ("bf16", "cuda", (7, 0), "fp16", True),
                 ("fp16", "cuda", (8, 6), "fp16", False), ("fp32", "cuda", (8, 0), "fp32", False)]
        for req, dev, cap, want, warns in cases:
            got, warn = device.choose_precision(req, dev, cap)
            self.assertEqual((got, bool(warn)), (want, warns), (req, dev, cap))

    def test_grad_scaler(self):
        class S:
            def __init__(self, *a):
                self.args = a
        new = type("T", (), {"amp": type("A", (), {"GradScaler": S}), "cuda": None})
        self.assertEqual(device.grad_scaler(new).args, ("cuda",))
        old = type("T", (), {"amp": type("A", (), {}), "cuda": type("C", (), {"amp": type("A", (), {"GradScaler": S})})})
        self.assertEqual(device.grad_scaler(old).args, ())

    def test_clamp(self):
        cfg = type("C", (), {"max_position_embeddings": 514, "model_type": "roberta"})
        self.assertEqual(models.clamp_max_length(1024, cfg)[0], 512)
        self.assertIn("max_position_embeddings", models.clamp_max_length(1024, cfg)[1])
        self.assertEqual(models.clamp_max_length(128, cfg), (128, ""))
        self.assertEqual(models.clamp_max_length(300, type("C", (), {}), 256)[0], 256)
        self.assertEqual(models.clamp_max_length(300, type("C", (), {}), 10 ** 30)[0], 300)


if __name__ == "__main__":
    unittest.main()
