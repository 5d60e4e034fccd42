"""The /metrics text-format parser and the offload counters it picks out (in_container/metrics_text.py)."""

from __future__ import annotations

import math
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "in_container"))

import metrics_text  # noqa: E402
from metrics_text import MetricsParseError, Sample  # noqa: E402

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


def test_samples_names_labels_values():
    samples = metrics_text.parse(EXPOSITION)
    assert len(samples) == 10  # comments skipped
    first = samples[0]
    assert first.name == "sglang:offload_events_total"
    assert first.labels == {"engine_type": "unified", "event": "uses", "model_name": "/model", "path": "tokenizer_process"}
    assert first.value == 2.0
    assert samples[-2].labels["le"] == "+Inf"
    assert samples[-1] == Sample("sglang:num_requests_total", {}, 5.0)


def test_label_values_with_quotes_escapes_commas_and_braces():
    text = 'm{a="say \\"hi\\"",b="back\\\\slash",c="two\\nlines",d="x,y}z",e="",f="\\q"} 1\n'
    (sample,) = metrics_text.parse(text)
    assert sample.labels == {"a": 'say "hi"', "b": "back\\slash", "c": "two\nlines", "d": "x,y}z", "e": "", "f": "\\q"}


def test_spaces_trailing_comma_timestamps_and_special_values():
    text = ("a_total { x = \"1\" , } 3 1700000000000\n"
            "b +Inf\n"
            "c -Inf\n"
            "d NaN\n"
            "e{} 1e3\n"
            "  \n"
            "# any other comment\n"
            "#TYPE without a space is a comment too\n")
    a, b, c, d, e = metrics_text.parse(text)
    assert (a.name, a.labels, a.value) == ("a_total", {"x": "1"}, 3.0)
    assert b.value == math.inf and c.value == -math.inf and math.isnan(d.value)
    assert (e.labels, e.value) == ({}, 1000.0)


@pytest.mark.parametrize("line", [
    'm{a="1"',            # no closing brace
    'm{a=1} 2',           # unquoted value
    'm{a="unterminated} 2',
    'm{="x"} 1',          # no label name
    'm{a="1" b="2"} 1',   # no comma
    'm',                  # no value
    'm 1 2 3',            # too many fields
    'm{a="1"} one',       # not a number
    '{a="1"} 1',          # no name
])
def test_malformed_lines_are_errors_naming_the_line(line):
    with pytest.raises(MetricsParseError, match="line 2"):
        metrics_text.parse("ok 1\n" + line + "\n")


def test_offload_counters_match_path_and_event_only_and_sum_other_label_sets():
    text = EXPOSITION + (
        'sglang:offload_events_total{engine_type="unified",event="uses",model_name="other",path="tokenizer_process"} 1\n'
        'sglang:offload_events_total{event="uses"} 9\n')  # no path: ignored
    counters = metrics_text.offload_counters(metrics_text.parse(text))
    assert counters["events"] == {
        "json_process.uses": 3, "preprocessing_lane_bulk.uses": 3, "preprocessing_lane_small.uses": 4,
        "tokenizer_process.fallbacks": 0, "tokenizer_process.uses": 3}
    assert counters["queue_depth"] == {"preprocessing_lane_bulk": 0, "preprocessing_lane_small": 1}
    assert all(isinstance(v, int) for v in counters["events"].values())


def test_no_offload_counters_is_none_not_zeros():
    stock = "# TYPE sglang:http_requests_total counter\nsglang:http_requests_total{endpoint=\"/health\"} 4\n"
    assert metrics_text.offload_counters(metrics_text.parse(stock)) is None
    # HELP/TYPE alone (a labelled counter before its first increment) has no sample either
    assert metrics_text.offload_counters(metrics_text.parse("# TYPE sglang:offload_events_total counter\n")) is None


def _serve(status: int, body):
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


def test_scrape_is_a_plain_get_on_loopback():
    server = _serve(200, EXPOSITION.encode())
    try:
        status, text, error = metrics_text.scrape(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
    assert (status, error) == (200, None)
    assert metrics_text.offload_counters(metrics_text.parse(text))["events"]["tokenizer_process.uses"] == 2


def test_scrape_reports_404_and_no_server():
    server = _serve(404, b"Not Found")
    try:
        status, _, error = metrics_text.scrape(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
    assert status == 404 and "HTTP 404" in error
    port = server.server_address[1]  # closed now
    status, text, error = metrics_text.scrape(port, timeout_s=2)
    assert (status, text) == (0, "") and error


class _Counters:
    """A /metrics whose tokenizer_process.uses the test moves."""

    def __init__(self) -> None:
        self.uses = 0

    def text(self) -> bytes:
        return (EXPOSITION.replace('path="tokenizer_process"} 2.0', f'path="tokenizer_process"}} {self.uses}.0')).encode()


def test_session_scrapes_around_a_phase_and_the_host_gets_the_delta(tmp_path, monkeypatch):
    import argparse
    import json
    from dataclasses import asdict

    import session

    from lab import offload

    monkeypatch.setattr(session, "metrics_mode", lambda no_metrics: (True, None))
    counters = _Counters()
    server = _serve(200, counters.text)
    try:
        args = argparse.Namespace(no_metrics=False, port=server.server_address[1], out=tmp_path)
        report = session.Report()
        s = session.Session(args, report)
        before = s.scrape("server", "start")
        counters.uses = 2
        big = {"name": "big", "body_bytes": 4_700_000, "prompt_chars": 4_690_000}
        s.record_phase("text", "server", [big, dict(big, name="big2"), {"name": "s", "body_bytes": 90, "prompt_chars": 80}],
                       before)
    finally:
        server.shutdown()
        server.server_close()
    (phase,) = report.metrics["phases"]
    assert (phase["requests"], phase["large_prompts"], phase["large_bodies"]) == (3, 2, 2)
    assert phase["after"]["file"] == "metrics/server.text.prom" and (tmp_path / "metrics" / "server.text.prom").is_file()
    record = offload.arm_offload(json.loads(json.dumps(asdict(report))))
    assert record["metrics_enabled"] is True
    assert record["phases"]["text"]["delta"]["tokenizer_process.uses"] == 2


def test_session_without_prometheus_client_starts_servers_without_metrics(tmp_path, monkeypatch):
    import argparse

    import session

    monkeypatch.setattr(session.importlib.util, "find_spec", lambda name: None)
    assert session.metrics_mode(False) == (False, "prometheus_client is not importable in this image"
                                                  " (sglang's --enable-metrics imports it)")
    assert session.metrics_mode(True) == (False, "--no-metrics")
    report = session.Report()
    s = session.Session(argparse.Namespace(no_metrics=False, port=1, out=tmp_path), report)
    record = s.scrape("server", "start")
    assert record["offload"] is None and record["error"].startswith("metrics off: prometheus_client")
    assert report.metrics["enabled"] is False


def test_server_command_has_enable_metrics(tmp_path, monkeypatch):
    import argparse
    import subprocess

    import session

    started = {}

    class _Proc:
        pid = 12345

    def fake_popen(command, **kwargs):
        started["command"], started["env"], started["preexec_fn"] = command, kwargs["env"], kwargs["preexec_fn"]
        return _Proc()

    monkeypatch.setattr(session, "metrics_mode", lambda no_metrics: (True, None))
    monkeypatch.setattr(subprocess, "Popen", fake_popen)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "/somewhere")
    monkeypatch.setattr(session.Server, "wait_ready", lambda self, timeout_s: 0.0)
    nice = {12345: 0}
    monkeypatch.setattr(session, "process_nice", lambda pid: nice[pid])
    s = session.Session(argparse.Namespace(no_metrics=False, port=1, out=tmp_path, server_arg=[],
                                           server_timeout_s=1.0), session.Report())
    s.start_server(tmp_path, ["--enable-multimodal"], "server")
    assert started["command"][-2:] == ["--enable-multimodal", "--enable-metrics"]
    assert started["preexec_fn"] is session._server_priority and s.report.server_nice == [0]
    s.server._log.close()
    nice[12345] = 10  # a server left at the client's priority is refused, not measured
    with pytest.raises(session.SessionError, match="nice 10"):
        s.start_server(tmp_path, [], "server")
    assert "PROMETHEUS_MULTIPROC_DIR" not in started["env"]  # sglang makes its own per server
    s.server._log.close()


def test_process_nice_reads_a_childs_priority():
    import subprocess
    import sys

    import session

    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                             preexec_fn=lambda: os.nice(3))
    try:
        assert session.process_nice(child.pid) == os.getpriority(os.PRIO_PROCESS, 0) + 3
    finally:
        child.communicate(b"")


def test_a_server_that_cannot_get_its_priority_back_is_a_clear_error(monkeypatch):
    import subprocess

    import session

    def refused(command, **kwargs):
        raise subprocess.SubprocessError("Exception occurred in preexec_fn.")

    monkeypatch.setattr(subprocess, "Popen", refused)
    with pytest.raises(session.SessionError, match="server at nice 0 .*CAP_SYS_NICE.*--client-nice 0"):
        session.spawn_at_server_priority("server", ["python3", "-m", "sglang.launch_server"])

