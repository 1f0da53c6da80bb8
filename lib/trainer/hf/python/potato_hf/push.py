"""Publishes a run's model to the Hugging Face Hub with huggingface_hub,
for potato-dispatch push (potato-dispatch(1), PUSH). The toolkit writes
this file on its own and runs it as

    PYTHON push.py

with one JSON object on standard input, never on the command line:

    {"token": ..., "repo": "OWNER/NAME", "private": true, "revision": "",
     "files": [{"path": ABSOLUTE PATH, "path_in_repo": ...}],
     "readme": "the model card", "commit_message": ...}

It makes the repo when it is missing (private unless "private" is false),
refuses a repo that exists and is public when a private one was asked
for, makes the branch "revision" names when it is missing, and commits
the files and README.md in one commit. The endpoint is the library's:
HF_ENDPOINT when set. Uploads take the Git LFS path of the Hub's API, not
Xet (HF_HUB_DISABLE_XET is set here before the library is imported), so
that the path the tests run against a stand-in for the Hub is the one a
real push takes; the Hub accepts LFS uploads into Xet-backed repos.

It prints one JSON object on standard output: {"repo_url", "commit_url",
"commit_oid", "revision", "private", "created"}. A failure is one line on
standard error, starting "push: ", and the exit code: 1 when the Hub or
the network refused, 2 for a bad request, 3 when huggingface_hub is
missing. Imports the standard library alone until the request is read;
no module of potato_hf."""

import json
import os
import sys

EXIT_FAILED = 1
EXIT_BAD_REQUEST = 2
EXIT_MISSING_DEPENDENCY = 3


class PushError(Exception):
    def __init__(self, code, message):
        Exception.__init__(self, message)
        self.code = code
        self.message = message


def read_request(stream):
    """The request of standard input, checked."""
    line = stream.readline()
    try:
        req = json.loads(line)
    except ValueError as e:
        raise PushError(EXIT_BAD_REQUEST, "standard input holds no JSON request: %s" % e)
    if not isinstance(req, dict):
        raise PushError(EXIT_BAD_REQUEST, "the request is not a JSON object")
    for key, kind in (("token", str), ("repo", str), ("private", bool), ("readme", str), ("files", list)):
        if not isinstance(req.get(key), kind):
            raise PushError(EXIT_BAD_REQUEST, "the request's %s is missing or not a %s" % (key, kind.__name__))
    if not req["token"].strip():
        raise PushError(EXIT_BAD_REQUEST, "the request holds no token")
    for f in req["files"]:
        if not (isinstance(f, dict) and isinstance(f.get("path"), str) and isinstance(f.get("path_in_repo"), str)):
            raise PushError(EXIT_BAD_REQUEST, "a file of the request has no path or path_in_repo")
        if not os.path.isabs(f["path"]) or not os.path.isfile(f["path"]):
            raise PushError(EXIT_BAD_REQUEST, "%s is not a file" % f["path"])
    return req


def import_hub():
    """huggingface_hub, imported with Xet uploads off and no progress bars."""
    os.environ["HF_HUB_DISABLE_XET"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
    try:
        import huggingface_hub  # noqa: PLC0415
        from huggingface_hub import CommitOperationAdd, HfApi  # noqa: PLC0415
        from huggingface_hub.errors import HfHubHTTPError  # noqa: PLC0415
    except ImportError as e:
        raise PushError(EXIT_MISSING_DEPENDENCY, "huggingface_hub cannot be imported by %s (%s): install it there, "
                        "or name an interpreter that has it (model_training.python, POTATO_TRAINING_PYTHON)"
                        % (sys.executable, e))
    return huggingface_hub, CommitOperationAdd, HfApi, HfHubHTTPError


def status_of(err):
    resp = getattr(err, "response", None)
    return getattr(resp, "status_code", None)


def hub_message(err, token):
    """The error's first lines, without the token should it be there."""
    text = " ".join(str(err).split())
    if token:
        text = text.replace(token, "<token>")
    return text[:2000]


def push(req, hub=None):
    """Does the request; returns what to print."""
    _, CommitOperationAdd, HfApi, HfHubHTTPError = hub or import_hub()
    token, repo = req["token"].strip(), req["repo"]
    revision = req.get("revision") or None
    api = HfApi(token=token)
    created = True
    try:
        url = api.create_repo(repo, private=req["private"], repo_type="model", exist_ok=False)
    except HfHubHTTPError as e:
        if status_of(e) != 409:
            raise
        created = False
        url = None
    private = req["private"]
    if not created:
        info = api.model_info(repo)
        private = bool(getattr(info, "private", False))
        if req["private"] and not private:
            raise PushError(EXIT_FAILED, "the repo %s exists and is public: the push is private unless asked "
                            "otherwise; pass --public to push to it" % repo)
    if revision and revision != "main":
        api.create_branch(repo, branch=revision, repo_type="model", exist_ok=True)
    ops = [CommitOperationAdd(path_in_repo=f["path_in_repo"], path_or_fileobj=f["path"]) for f in req["files"]]
    ops.append(CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=req["readme"].encode("utf-8")))
    info = api.create_commit(repo, ops, commit_message=req.get("commit_message") or "Upload model",
                             repo_type="model", revision=revision)
    repo_url = str(url) if url is not None else "%s/%s" % (api.endpoint.rstrip("/"), repo)
    return {"repo_url": repo_url, "commit_url": info.commit_url, "commit_oid": info.oid,
            "revision": revision or "main", "private": private, "created": created}


def main(stdin=sys.stdin, stdout=sys.stdout, stderr=sys.stderr):
    token = ""
    try:
        req = read_request(stdin)
        token = req["token"].strip()
        hub = import_hub()
        try:
            out = push(req, hub)
        except PushError:
            raise
        except hub[3] as e:
            raise PushError(EXIT_FAILED, "the Hub refused: %s" % hub_message(e, token))
        except Exception as e:  # noqa: BLE001 - the network, a malformed answer: whatever the library raises
            raise PushError(EXIT_FAILED, "%s: %s" % (type(e).__name__, hub_message(e, token)))
    except PushError as e:
        stderr.write("push: %s\n" % (e.message.replace(token, "<token>") if token else e.message))
        return e.code
    stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
