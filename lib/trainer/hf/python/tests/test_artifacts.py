"""Unit tests of what a run leaves: the models saved aside, then renamed
into place with the predictions."""

import io
import json
import os
import tempfile
import unittest

import support  # noqa: F401 - puts potato_hf on the path
from potato_hf import artifacts, events


class FakeLoaded:
    """A model that saves one file, as a Loaded does."""

    card = {"base_model": "m", "lora": None}

    def save(self, out_dir):
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, "weights.bin"), "wb") as f:
            f.write(b"w" * 10)


class TestArtifacts(unittest.TestCase):
    def test_model_dir_name(self):
        self.assertEqual(artifacts.model_dir_name("a/b\\c"), "model-a_b_c")
        self.assertEqual(artifacts.model_dir_name(""), "model-_")

    def test_saved_aside_then_published(self):
        with tempfile.TemporaryDirectory() as work:
            card = {"schema": "spam/x", "kind": "nominal", "labels": ["spam", "ham"]}
            partial, final = artifacts.save_model(work, FakeLoaded(), card)
            self.assertEqual(os.path.basename(partial), ".partial-model-spam_x")
            self.assertEqual(sorted(os.listdir(partial)), ["labels.json", "model_card.json", "weights.bin"])
            self.assertFalse(os.path.exists(final))
            tmp = os.path.join(work, "predictions.jsonl.tmp")
            with open(tmp, "w") as f:
                f.write("{}\n")
            out = io.StringIO()
            artifacts.publish([(partial, final)], tmp, os.path.join(work, "predictions.jsonl"), work,
                              events.Events(out))
            self.assertEqual(sorted(os.listdir(work)), ["model-spam_x", "predictions.jsonl"])
            evs = [json.loads(l) for l in out.getvalue().splitlines()]
            self.assertEqual([(e["path"], e["bytes"]) for e in evs][-1], ("model-spam_x/weights.bin", 10))
            self.assertEqual(len(evs), 3)

    def test_remove_partial(self):
        with tempfile.TemporaryDirectory() as work:
            partial, _ = artifacts.save_model(work, FakeLoaded(), {"schema": "s", "kind": "nominal", "labels": []})
            os.makedirs(os.path.join(work, "model-kept"))
            artifacts.remove_partial(work)
            self.assertEqual(os.listdir(work), ["model-kept"])
            artifacts.remove_partial(os.path.join(work, "absent"))


if __name__ == "__main__":
    unittest.main()
