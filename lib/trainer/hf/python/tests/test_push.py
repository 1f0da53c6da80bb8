"""push.py, the upload of potato-dispatch push, against a fake of the few
names of huggingface_hub it uses: the request it refuses, what it makes
of the Hub's answers, and that the token never appears in what it says.
The real library against a stand-in for the Hub is in Go's tests
(internal/hubstandin, cmd/potato-dispatch TestPushRealModel)."""

import io
import json
import os
import shutil
import tempfile
import unittest

import support  # noqa: F401 - puts potato_hf on sys.path
from potato_hf import push

TOKEN = "hf_pythonTestToken9"


class FakeHTTPError(Exception):
    def __init__(self, status, text):
        Exception.__init__(self, text)
        self.response = type("R", (), {"status_code": status})()


class FakeOp:
    def __init__(self, path_in_repo, path_or_fileobj):
        self.path_in_repo, self.data = path_in_repo, path_or_fileobj


class FakeAPI:
    """A Hub of one user: existing repos by id (private or not)."""
    repos = {}
    commits = []
    fail = None

    def __init__(self, token):
        self.token, self.endpoint = token, "http://hub.test"

    def create_repo(self, repo, private, repo_type, exist_ok):
        if FakeAPI.fail:
            raise FakeAPI.fail
        if repo in FakeAPI.repos:
            raise FakeHTTPError(409, "409 Conflict: You already created this model repo")
        FakeAPI.repos[repo] = private
        return "http://hub.test/" + repo

    def model_info(self, repo):
        return type("I", (), {"private": FakeAPI.repos[repo]})()

    def create_branch(self, repo, branch, repo_type, exist_ok):
        pass

    def create_commit(self, repo, ops, commit_message, repo_type, revision):
        FakeAPI.commits.append((repo, [o.path_in_repo for o in ops], revision))
        return type("C", (), {"commit_url": "http://hub.test/%s/commit/abc" % repo, "oid": "abc"})()


FAKE = (None, FakeOp, FakeAPI, FakeHTTPError)


class PushTest(unittest.TestCase):
    def setUp(self):
        FakeAPI.repos, FakeAPI.commits, FakeAPI.fail = {}, [], None
        self.orig = push.import_hub
        push.import_hub = lambda: FAKE
        self.dir = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, self.dir)
        self.file = os.path.join(self.dir, "config.json")
        with open(self.file, "w") as f:
            f.write("{}")

    def tearDown(self):
        push.import_hub = self.orig

    def run_main(self, req):
        out, err = io.StringIO(), io.StringIO()
        line = req if isinstance(req, str) else json.dumps(req)
        code = push.main(io.StringIO(line + "\n"), out, err)
        return code, out.getvalue(), err.getvalue()

    def request(self, **over):
        req = {"token": TOKEN, "repo": "alice/m", "private": True, "revision": "",
               "files": [{"path": self.file, "path_in_repo": "config.json"}], "readme": "---\n---\n# m\n"}
        req.update(over)
        return req

    def test_pushes_private_with_the_card(self):
        code, out, err = self.run_main(self.request())
        self.assertEqual(code, 0, err)
        res = json.loads(out)
        self.assertEqual((res["private"], res["created"], res["commit_oid"], res["revision"]), (True, True, "abc", "main"))
        self.assertEqual(FakeAPI.commits, [("alice/m", ["config.json", "README.md"], None)])
        self.assertTrue(FakeAPI.repos["alice/m"])

    def test_refuses_a_public_repo_to_a_private_push(self):
        FakeAPI.repos["alice/m"] = False
        code, out, err = self.run_main(self.request())
        self.assertEqual((code, out), (1, ""))
        self.assertIn("exists and is public", err)
        self.assertEqual(FakeAPI.commits, [])
        code, out, err = self.run_main(self.request(private=False))
        self.assertEqual(code, 0, err)
        self.assertFalse(json.loads(out)["created"])

    def test_the_hubs_refusal_without_the_token(self):
        FakeAPI.fail = FakeHTTPError(401, "401 Unauthorized for token %s" % TOKEN)
        code, out, err = self.run_main(self.request())
        self.assertEqual((code, out), (1, ""))
        self.assertTrue(err.startswith("push: the Hub refused: 401"), err)
        self.assertNotIn(TOKEN, err)
        FakeAPI.fail = ConnectionError("cannot connect with %s" % TOKEN)
        code, _, err = self.run_main(self.request())
        self.assertEqual(code, 1)
        self.assertIn("ConnectionError", err)
        self.assertNotIn(TOKEN, err)

    def test_bad_requests(self):
        for req, want in (("not json", "no JSON request"),
                          ("[1]", "not a JSON object"),
                          (self.request(token=" "), "holds no token"),
                          (self.request(private="yes"), "private is missing or not a bool"),
                          (self.request(files=[{"path": "config.json", "path_in_repo": "x"}]), "is not a file"),
                          (self.request(files=[{"path": self.file}]), "no path or path_in_repo")):
            code, out, err = self.run_main(req)
            self.assertEqual((code, out), (2, ""), req)
            self.assertIn(want, err)
        self.assertEqual(FakeAPI.commits, [])


if __name__ == "__main__":
    unittest.main()
