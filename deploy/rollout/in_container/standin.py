"""Stand-in for a sidecar whose image cannot be had here (nginx, the inference proxy).

An HTTP forwarder: each request goes to the next backend in turn that is not drained, once (a
backend that fails fails the request: the client sees what the proxy's own routing produces,
which is what the rehearsal counts). The answer carries `X-Upstream: <backend host>` (the
innermost one when stand-ins are chained), which is how the rehearsal sees which replica
answered through the proxy path; when the backend does not answer, the 502 carries
`X-Upstream-Errors` (the backend and why).

The drain API the rollout tool uses (deploy/rollout/drain.py; docs/rollout.md, "Drain"):

    GET  /_rollout/backends               {"backends": [{"host", "port", "draining", "in_flight"}]}
    POST /_rollout/drain?backend=HOST     no new request goes to HOST (in-flight ones finish)
    POST /_rollout/restore?backend=HOST   HOST is routed to again

    python3 standin.py --port 8000 --backend http://proxy-glm53:8000 [--backend ...]

SIGTERM ends it at once, as it ends nginx: it runs as the container's PID 1, for which the
kernel ignores a signal without a handler, so `stop`/`down` would otherwise wait out the grace
period (10 s per stand-in at the rehearsal's teardown).
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import signal
import sys
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}
CONTROL = "/_rollout/"


@dataclass
class Backend:
    host: str
    port: int
    draining: bool = False
    in_flight: int = 0


class Pool:
    def __init__(self, backends: list[tuple[str, int]]) -> None:
        self.backends = [Backend(h, p) for h, p in backends]
        self._turn = itertools.count()
        self._lock = threading.Lock()

    def take(self) -> Backend | None:
        """The next backend that is not draining, its in-flight count raised; None if all drain."""
        with self._lock:
            start = next(self._turn)
            for i in range(len(self.backends)):
                backend = self.backends[(start + i) % len(self.backends)]
                if not backend.draining:
                    backend.in_flight += 1
                    return backend
        return None

    def done(self, backend: Backend) -> None:
        with self._lock:
            backend.in_flight -= 1

    def set_draining(self, host: str, draining: bool) -> bool:
        with self._lock:
            found = [b for b in self.backends if b.host == host]
            for backend in found:
                backend.draining = draining
        return bool(found)

    def describe(self) -> dict:
        with self._lock:
            return {"backends": [vars(b).copy() for b in self.backends]}


def make_handler(backends: list[tuple[str, int]]):
    pool = Pool(backends)

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _reply(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _control(self) -> None:
            url = urlsplit(self.path)
            action = url.path[len(CONTROL):]
            if self.command == "GET" and action == "backends":
                self._reply(200, json.dumps(pool.describe()).encode(), {"Content-Type": "application/json"})
                return
            host = (parse_qs(url.query).get("backend") or [""])[0]
            if self.command == "POST" and action in ("drain", "restore"):
                if pool.set_draining(host, action == "drain"):
                    self._reply(200, json.dumps(pool.describe()).encode(), {"Content-Type": "application/json"})
                else:
                    self._reply(404, f"no backend {host!r}\n".encode())
                return
            self._reply(404, f"unknown control request {self.command} {url.path}\n".encode())

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if self.path.startswith(CONTROL):
                self._control()
                return
            backend = pool.take()
            if backend is None:
                self._reply(503, headers={"X-Upstream-Errors": "every backend is drained"})
                return
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            conn = http.client.HTTPConnection(backend.host, backend.port, timeout=60)
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
            except OSError as err:
                self._reply(502, headers={"X-Upstream-Errors": f"{backend.host}:{backend.port} {err or type(err).__name__}"})
                return
            finally:
                conn.close()
                pool.done(backend)
            self.send_response(response.status)
            for key, value in response.getheaders():
                if key.lower() not in HOP_BY_HOP and key.lower() != "content-length":
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            if response.getheader("X-Upstream") is None:  # behind another stand-in: keep the innermost
                self.send_header("X-Upstream", backend.host)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _forward

        def log_message(self, fmt: str, *args) -> None:
            pass

    return Forward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--backend", action="append", required=True, help="http://HOST:PORT")
    args = parser.parse_args()
    backends = [(urlsplit(b).hostname, urlsplit(b).port or 80) for b in args.backend]
    server = ThreadingHTTPServer(("0.0.0.0", args.port), make_handler(backends))
    server.daemon_threads = True
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))
    print(f"standin: :{args.port} -> {', '.join(args.backend)}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
