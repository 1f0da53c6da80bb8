"""Unit tests of the command and its exit codes."""

import io
import json
import tempfile
import unittest

from support import write_bundle, write_spec
from potato_hf import main as cli, packages


class TestMain(unittest.TestCase):
    def test_bad_spec_exits_2(self):
        out, err = io.StringIO(), io.StringIO()
        with tempfile.TemporaryDirectory() as d:
            code = cli.main(["--spec", write_spec(d, params={"epochs": "x"})], out, err)
        self.assertEqual(code, 2)
        ev = json.loads(out.getvalue().splitlines()[-1])
        self.assertEqual((ev["event"], ev["code"]), ("error", "bad_spec"))

    def test_missing_dependency_exits_3(self):
        if not packages.missing_packages():
            self.skipTest("torch, transformers and peft are installed: nothing is missing")
        out, err = io.StringIO(), io.StringIO()
        with tempfile.TemporaryDirectory() as d:
            write_bundle(d, {"train": []})
            code = cli.main(["--spec", write_spec(d)], out, err)
        self.assertEqual(code, 3)
        ev = json.loads(out.getvalue().splitlines()[-1])
        self.assertEqual(ev["code"], "missing_dependency")
        self.assertEqual(ev["message"], "Trainer 'hf-text-classification' could not be imported")
        self.assertTrue(ev["install_hint"].startswith("pip install "))


if __name__ == "__main__":
    unittest.main()
