"""Test helpers for an SGLang server's /metrics: a sample exposition and a loopback server.

Used by the parser's tests (tools/sglang_server/tests/test_metrics_text.py) and the lab's session
tests (lab/tests/test_session.py).
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# The shape prometheus_client's generate_latest writes for sglang with the v3 offload counters
# (multiprocess mode: no _created samples), plus the server's own metrics around them.
EXPOSITION = r'''# HELP sglang:offload_events_total Request preprocessing offload events (uses, fallbacks, deadline kills, restarts, start failures, rejected) per path.
# TYPE sglang:offload_events_total counter
sglang:offload_events_total{engine_type="unified",event="uses",model_name="/model",path="tokenizer_process"} 2.0
sglang:offload_events_total{engine_type="unified",event="fallbacks",model_name="/model",path="tokenizer_process"} 0.0
sglang:offload_events_total{engine_type="unified",event="uses",model_name="/model",path="json_process"} 3.0
sglang:offload_events_total{engine_type="unified",event="uses",model_name="/model",path="preprocessing_lane_bulk"} 3.0
sglang:offload_events_total{engine_type="unified",event="uses",model_name="/model",path="preprocessing_lane_small"} 4.0
# HELP sglang:offload_queue_depth Requests queued or running on an offload path.
# TYPE sglang:offload_queue_depth gauge
sglang:offload_queue_depth{engine_type="unified",model_name="/model",path="preprocessing_lane_bulk"} 0.0
sglang:offload_queue_depth{engine_type="unified",model_name="/model",path="preprocessing_lane_small"} 1.0
# HELP sglang:http_requests_total Total number of HTTP requests by endpoint and method
# TYPE sglang:http_requests_total counter
sglang:http_requests_total{endpoint="/health",method="GET"} 1523.0
sglang:e2e_request_latency_seconds_bucket{le="+Inf",model_name="/model"} 7.0
sglang:num_requests_total 5
'''


def serve_metrics(status: int, body):
    """A loopback HTTP server answering /metrics with `body` (bytes, or a callable giving them
    per request) and every other path with 404."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            payload = body() if callable(body) else body
            self.send_response(status if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
