"""A loopback stand-in for the Hugging Face Hub, enough for `upload_folder` and
`from_pretrained(repo_id)`.

huggingface.co cannot be reached from the tests, so this server speaks the part of the Hub's HTTP
API that huggingface_hub's client uses for a push and a download
(`HF_ENDPOINT=http://127.0.0.1:PORT`):

    POST /api/repos/create                          create a repository (409 if it exists)
    POST /api/validate-yaml                         accept the model card's metadata
    POST /api/models/{repo}/preupload/{revision}    every file goes inline ("regular", not LFS)
    POST /api/models/{repo}/commit/{revision}       NDJSON: a header, then files as base64
    GET  /api/models/{repo}[/revision/{revision}]   repository info with its file list
    GET  /api/models/{repo}/tree/{revision}[/path]  file listing
    HEAD/GET /{repo}/resolve/{revision}/{path}      a file, with X-Repo-Commit and ETag headers;
                                                    404 with X-Error-Code EntryNotFound / RepoNotFound

Spaces (`/api/spaces/...`, `/spaces/{repo}/resolve/...`, as for an `evaluate` metric Space) are
served the same way, from the same store.

Repositories live in memory: {repo_id: {path: bytes}}, plus a commit hash per repository. Every
request is recorded in `requests` so that tests can see what the client asked for.
"""  # noqa: E501

import base64
import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

REPO = r"(?P<repo>[^/]+/[^/]+)"
API = r"/api/(?:models|spaces)"  # a metric Space is stored like a model repository
ROUTES = [
    ("POST", re.compile(r"/api/repos/create"), "create_repo"),
    ("POST", re.compile(r"/api/validate-yaml"), "validate_yaml"),
    ("POST", re.compile(rf"{API}/{REPO}/preupload/(?P<revision>[^/]+)"), "preupload"),
    ("POST", re.compile(rf"{API}/{REPO}/commit/(?P<revision>[^/]+)"), "commit"),
    ("GET", re.compile(rf"{API}/{REPO}/tree/(?P<revision>[^/]+)(?:/(?P<path>.*))?"), "tree"),
    ("GET", re.compile(rf"{API}/{REPO}(?:/revision/(?P<revision>[^/]+))?"), "repo_info"),
    (
        "GET",
        re.compile(rf"(?:/spaces)?/{REPO}/resolve/(?P<revision>[^/]+)/(?P<path>.+)"),
        "resolve",
    ),
    (
        "HEAD",
        re.compile(rf"(?:/spaces)?/{REPO}/resolve/(?P<revision>[^/]+)/(?P<path>.+)"),
        "resolve",
    ),
]


class LoopbackHub:
    """`with LoopbackHub() as hub:` serves on `hub.endpoint` from a background thread until the
    block ends."""

    def __init__(self):
        self.repos: dict[str, dict[str, bytes]] = {}
        self.commits: dict[str, str] = {}
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc_info):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    # --- the API, one method per route: (status, headers, body) -----------------------------------

    def create_repo(self, body: bytes, **_):
        request = json.loads(body)
        repo_id = (
            f"{request['organization']}/{request['name']}"
            if request.get("organization")
            else request["name"]
        )
        if "/" not in repo_id:
            repo_id = f"user/{repo_id}"
        with self.lock:
            if repo_id in self.repos:
                return (
                    409,
                    {},
                    {
                        "error": "You already created this model repo",
                        "url": f"{self.endpoint}/{repo_id}",
                    },
                )
            self.repos[repo_id] = {}
            self.commits[repo_id] = hashlib.sha1(repo_id.encode()).hexdigest()
        return 200, {}, {"url": f"{self.endpoint}/{repo_id}", "name": repo_id, "id": repo_id}

    def validate_yaml(self, **_):
        return 200, {}, {"errors": [], "warnings": []}

    def preupload(self, repo: str, body: bytes, **_):
        if repo not in self.repos:
            return _not_found("RepoNotFound", repo)
        files = json.loads(body)["files"]
        return (
            200,
            {},
            {
                "files": [
                    {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                    for f in files
                ]
            },
        )

    def commit(self, repo: str, body: bytes, **_):
        if repo not in self.repos:
            return _not_found("RepoNotFound", repo)
        operations = [json.loads(line) for line in body.splitlines() if line.strip()]
        with self.lock:
            files = self.repos[repo]
            for operation in operations:
                if operation["key"] == "file":
                    files[operation["value"]["path"]] = base64.b64decode(
                        operation["value"]["content"]
                    )
                elif operation["key"] in ("deletedFile", "deletedFolder"):
                    files.pop(operation["value"]["path"], None)
                elif operation["key"] != "header":
                    return (
                        400,
                        {},
                        {"error": f"The loopback Hub does not support {operation['key']!r}."},
                    )
            digest = hashlib.sha1(self.commits[repo].encode())
            for path in sorted(files):
                digest.update(path.encode() + hashlib.sha1(files[path]).digest())
            self.commits[repo] = digest.hexdigest()
        commit = self.commits[repo]
        return (
            200,
            {},
            {
                "commitUrl": f"{self.endpoint}/{repo}/commit/{commit}",
                "commitOid": commit,
                "pullRequestUrl": None,
            },
        )

    def repo_info(self, repo: str, **_):
        if repo not in self.repos:
            return _not_found("RepoNotFound", repo)
        siblings = [{"rfilename": path} for path in sorted(self.repos[repo])]
        return (
            200,
            {},
            {
                "id": repo,
                "modelId": repo,
                "sha": self.commits[repo],
                "private": False,
                "siblings": siblings,
                "tags": [],
                "downloads": 0,
                "likes": 0,
            },
        )

    def tree(self, repo: str, path: str | None = None, **_):
        if repo not in self.repos:
            return _not_found("RepoNotFound", repo)
        prefix = f"{path.rstrip('/')}/" if path else ""
        entries = [
            {
                "type": "file",
                "path": name,
                "size": len(content),
                "oid": hashlib.sha1(content).hexdigest(),
            }
            for name, content in sorted(self.repos[repo].items())
            if name.startswith(prefix)
        ]
        return 200, {}, entries

    def resolve(self, repo: str, path: str, method: str, **_):
        if repo not in self.repos:
            return _not_found("RepoNotFound", repo)
        content = self.repos[repo].get(path)
        if content is None:
            return _not_found("EntryNotFound", f"{repo}/{path}")
        headers = {
            "X-Repo-Commit": self.commits[repo],
            "ETag": f'"{hashlib.sha1(content).hexdigest()}"',
            "Content-Length": str(len(content)),
            "Content-Type": "application/octet-stream",
        }
        return 200, headers, content if method == "GET" else b""


def _not_found(code: str, what: str):
    return (
        404,
        {"X-Error-Code": code, "X-Error-Message": f"{what} not found"},
        {"error": f"{what} not found"},
    )


def _handler_for(hub: LoopbackHub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            self._route("GET")

        def do_HEAD(self):
            self._route("HEAD")

        def do_POST(self):
            self._route("POST")

        def log_message(self, *args):  # keep test output clean; `hub.requests` records everything
            pass

        def _route(self, method: str):
            path = unquote(urlparse(self.path).path)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            hub.requests.append((method, path))
            for route_method, pattern, name in ROUTES:
                match = pattern.fullmatch(path)
                if route_method == method and match:
                    status, headers, payload = getattr(hub, name)(
                        body=body, method=method, **match.groupdict()
                    )
                    break
            else:
                status, headers, payload = (
                    404,
                    {},
                    {"error": f"The loopback Hub has no route for {method} {path}"},
                )
            self._send(status, headers, payload, method)

        def _send(self, status: int, headers: dict, payload, method: str):
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            if not isinstance(payload, bytes):
                self.send_header("Content-Type", "application/json")
            headers.setdefault("Content-Length", str(len(data)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            if method != "HEAD":
                self.wfile.write(data)

    return Handler
