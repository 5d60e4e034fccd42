"""TEST DOUBLE of the Hugging Face Hub: the few endpoints huggingface_hub calls to resolve pins.

Not the Hub. Serves, on 127.0.0.1, from an in-memory repository map:
  GET  /api/models/<org>/<name>/revision/<rev>    {"id", "sha"} (HfApi.model_info)
  HEAD|GET /<org>/<name>/resolve/<commit>/<path>  a file (hf_hub_download), with the
                                                  X-Repo-Commit and ETag headers it reads

    hub = FakeHub({"org/model": {"main": ("c0ffee...40 hex", {"file.jinja": b"..."})}})
    with hub:
        hub.endpoint  # http://127.0.0.1:<port>
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

# repository -> revision (branch/tag or commit) -> (commit, {path: bytes})
Repos = dict[str, dict[str, tuple[str, dict[str, bytes]]]]


class FakeHub:
    def __init__(self, repos: Repos) -> None:
        self.repos = repos
        self.requests: list[str] = []
        self._server: ThreadingHTTPServer | None = None

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def _lookup(self, repo: str, revision: str) -> tuple[str, dict[str, bytes]] | None:
        revisions = self.repos.get(repo, {})
        if revision in revisions:
            return revisions[revision]
        return next((entry for entry in revisions.values() if entry[0] == revision), None)

    def __enter__(self) -> "FakeHub":
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def _reply(self, status: int, body: bytes, headers: dict[str, str], send_body: bool) -> None:
                self.send_response(status)
                for key, value in {"Content-Length": str(len(body)), **headers}.items():
                    self.send_header(key, value)
                self.end_headers()
                if send_body:
                    self.wfile.write(body)

            def _handle(self, send_body: bool) -> None:
                path = unquote(self.path.split("?", 1)[0])
                hub.requests.append(f"{self.command} {path}")
                parts = path.strip("/").split("/")
                if parts[:2] == ["api", "models"] and len(parts) == 6 and parts[4] == "revision":
                    entry = hub._lookup(f"{parts[2]}/{parts[3]}", parts[5])
                    if entry:
                        body = json.dumps({"id": f"{parts[2]}/{parts[3]}", "sha": entry[0]}).encode()
                        return self._reply(200, body, {"Content-Type": "application/json"}, send_body)
                elif len(parts) >= 5 and parts[2] == "resolve":
                    entry = hub._lookup(f"{parts[0]}/{parts[1]}", parts[3])
                    data = entry[1].get("/".join(parts[4:])) if entry else None
                    if data is not None:
                        return self._reply(200, data, {
                            "X-Repo-Commit": entry[0],
                            "ETag": '"' + hashlib.sha1(data).hexdigest() + '"',
                            "Content-Type": "application/octet-stream",
                        }, send_body)
                body = json.dumps({"error": "Repository Not Found"}).encode()
                self._reply(404, body, {"Content-Type": "application/json",
                                        "X-Error-Code": "RepoNotFound"}, send_body)

            def do_GET(self) -> None:
                self._handle(True)

            def do_HEAD(self) -> None:
                self._handle(False)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
