"""Stand-in for a sidecar whose image cannot be had here (nginx, the inference proxy).

An HTTP forwarder: each request goes to the next backend in turn; a backend that refuses the
connection or answers 502/503 is skipped for the next one, so a replica being replaced does
not fail the request. The answer carries `X-Upstream: <backend host>` (the innermost one when
stand-ins are chained), which is how the rehearsal sees which replica answered through the
proxy path; when no backend answers, the 502 carries `X-Upstream-Errors` (each backend and why).

    python3 standin.py --port 8000 --backend http://proxy-glm53:8000 [--backend ...]
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


def make_handler(backends: list[tuple[str, int]]):
    turn = itertools.count()
    lock = threading.Lock()

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            with lock:
                start = next(turn)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            errors = []
            for i in range(len(backends)):
                host, port = backends[(start + i) % len(backends)]
                conn = http.client.HTTPConnection(host, port, timeout=60)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    response = conn.getresponse()
                    data = response.read()
                except OSError as err:
                    errors.append(f"{host}:{port} {err or type(err).__name__}")
                    continue
                finally:
                    conn.close()
                if response.status in (502, 503) and i + 1 < len(backends):
                    errors.append(f"{host}:{port} HTTP {response.status}")
                    continue
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in HOP_BY_HOP and key.lower() != "content-length":
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                if response.getheader("X-Upstream") is None:  # behind another stand-in: keep the innermost
                    self.send_header("X-Upstream", host)
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_response(502)
            self.send_header("X-Upstream-Errors", "; ".join(errors))
            self.send_header("Content-Length", "0")
            self.end_headers()

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
    print(f"standin: :{args.port} -> {', '.join(args.backend)}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
