"""Unit tests of the packages a run needs, and what happens without them."""

import json
import subprocess
import sys
import tempfile
import unittest

from support import PYTHON_DIR, REAL_HF, SPAM, need_torch, spam_bundle, write_spec
from potato_hf import packages


class TestDependencies(unittest.TestCase):
    def test_import_error_wording(self):
        msg, hint = packages.import_error(["torch", "transformers", "peft"])
        self.assertEqual(msg, "Trainer 'hf-text-classification' could not be imported")
        self.assertEqual(hint, "pip install torch transformers peft")

    def test_missing(self):
        have = {"torch"}
        self.assertEqual(packages.missing_packages(lambda n: object() if n in have else None), ["transformers", "peft"])
        self.assertEqual(packages.missing_packages(lambda n: object() if n in have else None, ("torch",)), [])


@need_torch
class TestMissingPackages(unittest.TestCase):
    def test_builtin_needs_torch_alone(self):
        # The interpreter as it is, without the stand-ins on its path.
        if REAL_HF:
            self.skipTest("transformers and peft are installed: nothing is missing")
        with tempfile.TemporaryDirectory() as d:
            spam_bundle(d, n=60)
            code = ("import sys; sys.path.insert(0, %r); from potato_hf.main import main; "
                    "sys.exit(main(['--spec', %r]))" % (PYTHON_DIR, write_spec(d, schemas=[SPAM], params={})))
            p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
            self.assertEqual(p.returncode, 3, p.stderr)
            evs = [json.loads(l) for l in p.stdout.splitlines()]
            self.assertIn("has no transformers", evs[-2]["msg"])
            self.assertIn("model=distilbert-base-uncased", evs[-2]["msg"])
            self.assertEqual(evs[-1]["code"], "missing_dependency")


if __name__ == "__main__":
    unittest.main()
