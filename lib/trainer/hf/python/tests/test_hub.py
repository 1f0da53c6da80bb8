"""Unit tests of models by name, offline first."""

import unittest

import support  # noqa: F401 - puts potato_hf on the path
from potato_hf import hub, spec


class TestOffline(unittest.TestCase):
    def test_paths_and_cache(self):
        self.assertTrue(hub.looks_like_path("/models/bert"))
        self.assertTrue(hub.looks_like_path("./bert"))
        self.assertFalse(hub.looks_like_path("org/bert"))
        self.assertFalse(hub.looks_like_path("bert"))
        self.assertEqual(hub.hub_cache_dir({"HF_HOME": "/h"}), "/h/hub")
        self.assertTrue(hub.is_offline({"HF_HUB_OFFLINE": "1"}))
        self.assertFalse(hub.is_offline({}))

    def test_fails_fast(self):
        calls = []

        def fn(name, local_files_only=False, **kw):
            calls.append(local_files_only)
            raise OSError("not cached")
        for env, reach in (({"HF_HUB_OFFLINE": "1", "HF_HOME": "/data/hf"}, None),
                           ({"HF_HOME": "/data/hf"}, lambda e: (False, "no route to the hub"))):
            calls.clear()
            with self.assertRaises(spec.TrainerError) as cm:
                hub.pretrained(fn, "org/absent", env, reachable=reach or (lambda e: self.fail("reached out")))
            e = cm.exception
            self.assertEqual((e.code, e.exit_code), ("model_unavailable", 3))
            self.assertIn("/data/hf/hub", e.message)
            self.assertIn("org/absent", e.message)
            self.assertEqual(calls, [True], "only the cache is tried")
        with self.assertRaises(spec.TrainerError) as cm:
            hub.pretrained(fn, "/no/such/model", {})
        self.assertIn("/no/such/model is not a directory", cm.exception.message)


if __name__ == "__main__":
    unittest.main()
