"""Unit tests of the v1 event lines and their writer."""

import io
import json
import unittest

import support  # noqa: F401 - puts potato_hf on the path
from potato_hf import events, spec


class TestEvents(unittest.TestCase):
    def test_line(self):
        line = events.event_line("progress", {"phase": "fit", "current": 3, "total": 30}, t=1796228039.75123)
        self.assertTrue(line.endswith("\n"))
        self.assertTrue(line.startswith('{"v":1,"event":"progress","t":1796228039.751,'))
        obj = json.loads(line)
        self.assertEqual(obj["current"], 3)

    def test_non_finite_is_null(self):
        obj = json.loads(events.event_line("metric", {"split": "val", "name": "s/loss",
                                                   "value": float("nan"), "step": 1}))
        self.assertIsNone(obj["value"])

    def test_writer(self):
        out = io.StringIO()
        ev = events.Events(out)
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
        self.assertEqual(r["model_version"], spec.MODEL_VERSION)


if __name__ == "__main__":
    unittest.main()
