"""The session's /metrics scrapes around a phase, its server command and the servers' priority
(in_container/session.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tools.sglang_server.testing import EXPOSITION, serve_metrics

# session.py imports its neighbours and the shared in-container modules (metrics_text) by name,
# as in the containers, where both directories are staged as one.
REPO = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(REPO / "tools" / "sglang_server" / "in_container"))
sys.path.insert(0, str(REPO / "lab" / "in_container"))


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
    server = serve_metrics(200, counters.text)
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
                                           server_timeout_s=1.0, sample_threads_ms=0.0), session.Report())
    s.start_server(tmp_path, ["--enable-multimodal"], "server")
    assert started["command"][-2:] == ["--enable-multimodal", "--enable-metrics"]
    # The thread sampler adds load: off unless asked for (the plugin does nothing without its file).
    assert "LAB_LOOP_SAMPLES" not in started["env"] and "lab_loop_sampler" in started["env"]["SGLANG_PLUGINS"]
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
