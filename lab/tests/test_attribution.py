"""Attribution of slow probes from a py-spy chrometrace: parsing, overlap, waits dropped, ranking."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab import attribution, report
from lab.results import Probe, ResultsError

MAIN, WORKER = 1, 2


def _frames(tid: int, thread: str, ts: int, names: list[tuple[str, str, int]], ph: str) -> list[dict]:
    stack = [(f"thread (0x{tid:x}): {thread}", "", 0), *names]
    items = stack if ph == "B" else list(reversed(stack))
    return [{"ph": ph, "ts": ts, "tid": tid, "pid": 7, "cat": "py-spy", "name": name,
             "args": {"filename": filename, "line": line}} for name, filename, line in items]


def _trace(tmp_path: Path) -> Path:
    """MainThread encodes from 100 to 160 ms; the worker converts from 150 to 400 ms, then waits."""
    encode = [("OpenAIServingChat._apply_jinja_template",
               "/usr/lib/python3/dist-packages/sglang/srt/entrypoints/openai/serving_chat.py", 1394),
              ("TokenizersBackend._encode_plus", "/usr/lib/python3/dist-packages/transformers/tok.py", 959)]
    worker = [("Thread.run", "/usr/lib/python3.11/threading.py", 975),
              ("_tokenize_off_loop", "/usr/lib/python3/dist-packages/sglang/srt/managers/tokenizer_manager.py", 10)]
    wait = [("Condition.wait", "/usr/lib/python3.11/threading.py", 324)]
    events = (_frames(MAIN, "MainThread", 100_000, encode, "B") + _frames(MAIN, "MainThread", 160_000, encode, "E")
              + _frames(WORKER, "preprocess", 150_000, worker, "B") + _frames(WORKER, "preprocess", 400_000, worker, "E")
              + _frames(WORKER, "preprocess", 400_000, wait, "B") + _frames(WORKER, "preprocess", 900_000, wait, "E"))
    path = tmp_path / "server.pyspy.json"
    path.write_text(json.dumps(events))
    return path


def test_trace_becomes_spans_on_the_monotonic_clock(tmp_path: Path):
    spans = attribution.load_trace(_trace(tmp_path), launched=50.0)
    main = [s for s in spans if s.thread == "MainThread"]
    assert len(main) == 1
    assert main[0].start == pytest.approx(50.1) and main[0].end == pytest.approx(50.16)
    assert main[0].stack[-1] == "TokenizersBackend._encode_plus (transformers/tok.py:959)"
    # the timed Condition.wait is a wait, not work: dropped
    assert [s.stack[-1] for s in spans if s.thread == "preprocess"] == [
        "_tokenize_off_loop (sglang/srt/managers/tokenizer_manager.py:10)"]


def test_slow_probes_get_the_code_that_ran_during_them(tmp_path: Path):
    spans = attribution.load_trace(_trace(tmp_path), launched=50.0)
    probes = [Probe(50.09, 50.17, 80.0, 200), Probe(50.2, 50.205, 5.0, 200), Probe(50.5, 50.55, 50.0, 200)]
    slow = attribution.attribute(probes, spans)
    assert [p.ms for p in slow] == [80.0, 50.0]  # the 5 ms probe is not attributed
    first = slow[0]
    assert first.shares[0].thread == "MainThread" and first.shares[0].ms == pytest.approx(60.0)
    assert first.shares[0].sglang_frame.startswith("OpenAIServingChat._apply_jinja_template")
    assert first.loop_ms == pytest.approx(60.0)
    assert {s.thread for s in first.shares} == {"MainThread", "preprocess"}
    assert slow[1].shares == []  # only a wait overlapped it: nothing ran

    s = attribution.summary(slow)
    assert s["slow_probes"] == 2 and s["unattributed"] == 1
    assert s["loop_culprits"][0]["frame"].startswith("TokenizersBackend._encode_plus")
    assert s["other_thread_culprits"][0]["thread"] == "preprocess"
    text = report.attribution_section({"v3": {"probes.jsonl": s | {"profiled": True}}})
    assert "2 probes over 20 ms" in text and "loop: 60 ms over 1 probes in `TokenizersBackend._encode_plus" in text
    assert "behind" not in text and "native profile" not in text
    native = report.attribution_section({"v3": {"probes.jsonl": s | {"profiled": True, "native": True}}})
    assert "(native profile: every thread is sampled, waiting ones too)" in native


def test_a_gc_pause_is_a_culprit_of_the_probes_it_overlaps(tmp_path: Path):
    """The server's GC record (gc_timeline.py's lines) joins the py-spy spans as a thread of its
    own; a missing record means none was kept, a malformed line names the file and line."""
    timeline = tmp_path / "vision-server.gc.jsonl"
    timeline.write_text(json.dumps({"pid": 9, "generation": 2, "start": 50.30, "ms": 40.0, "collected": 0}) + "\n"
                        + json.dumps({"pid": 9, "generation": 0, "start": 50.60, "ms": 1.5, "collected": 3}) + "\n")
    pauses = attribution.load_gc_pauses(timeline)
    spans = sorted(attribution.load_trace(_trace(tmp_path), launched=50.0) + pauses, key=lambda span: span.start)
    slow = attribution.attribute([Probe(50.29, 50.345, 55.0, 200)], spans)
    assert [(share.thread, share.frame, share.ms) for share in slow[0].shares] == [
        ("preprocess", "_tokenize_off_loop (sglang/srt/managers/tokenizer_manager.py:10)", 55.0),
        (attribution.GC_THREAD, "collect generation 2", 40.0)]
    assert attribution.gc_summary(pauses) == {"pauses": 2, "max_ms": 40.0, "total_ms": 41.5, "generation_2": 1}
    s = attribution.summary(slow) | {"gc": attribution.gc_summary(pauses)}
    text = report.attribution_section({"v4": {"mixed_probes.jsonl": s}})
    assert "2 pauses of 1 ms or more, 1 of generation 2, longest 40 ms" in text
    assert f"{attribution.GC_THREAD}: 40 ms over 1 probes in `collect generation 2`" in text

    assert attribution.load_gc_pauses(tmp_path / "none.gc.jsonl") == []
    timeline.write_text('{"pid": 9, "generation": 2}\n')
    with pytest.raises(ResultsError, match=r"vision-server.gc.jsonl:1: not a GC pause record"):
        attribution.load_gc_pauses(timeline)


def test_a_missing_or_cut_profile_is_an_error(tmp_path: Path):
    with pytest.raises(ResultsError, match="missing"):
        attribution.load_trace(tmp_path / "nope.json", 0.0)
    (tmp_path / "cut.json").write_text('[{"ph": "B"')
    with pytest.raises(ResultsError, match="not JSON"):
        attribution.load_trace(tmp_path / "cut.json", 0.0)


def test_sampler_lag_is_read_from_the_py_spy_log(tmp_path: Path):
    log = tmp_path / "server.pyspy.log"
    log.write_text("py-spy> Sampling process 100 times a second.\npy-spy> 1.70s behind in sampling, results\n"
                   "py-spy> 12.25s behind in sampling, results may be inaccurate\n")
    assert attribution.sampler_behind_s(log) == 12.25
    log.write_text("py-spy> Sampling process 100 times a second.\n")
    assert attribution.sampler_behind_s(log) == 0.0


def test_a_thread_blocked_on_its_child_process_pipe_is_waiting():
    pipe_waits = ["_read_exact (glm53_offload/offload_process.py:81)",
                  "_write_all (glm53_offload/offload_process.py:68)"]
    work = ["JsonProcess.loads (glm53_offload/offload_process.py:260)",
            "_read_exact (sglang/srt/managers/tokenizer_manager.py:81)"]
    assert all(attribution._WAITING.match(frame) for frame in pipe_waits)
    assert not any(attribution._WAITING.match(frame) for frame in work)


def test_profile_native_reaches_the_session_and_replaces_gil_sampling():
    """--profile-native: py-spy samples every thread with its C frames (--native --idle); the
    default stays --gil --nonblocking (a sample is the GIL's holder, the server never stopped)."""
    health_stall = pytest.importorskip("lab.health_stall", reason="needs the host lab (//lab:unit_test)")
    import argparse

    def command(native: bool, sample_threads_ms: float = 0.0) -> list[str]:
        args = argparse.Namespace(interval_ms=10.0, flood_minutes=0.0, mixed_minutes=0.0, no_profile=False,
                                  profile_rate_hz=100, profile_native=native, no_metrics=False,
                                  client_nice=10, sample_threads_ms=sample_threads_ms)
        return health_stall.session_command(args, ["multimodal_16x48MP"])

    assert "--profile-native" in command(True) and "--py-spy" in command(True)
    assert "--sample-threads-ms" not in command(False)
    with_sampler = command(False, sample_threads_ms=5.0)
    assert with_sampler[with_sampler.index("--sample-threads-ms") + 1] == "5.0"
    assert "--profile-native" not in command(False)
    assert command(False)[command(False).index("--client-nice") + 1] == "10"
    with pytest.raises(SystemExit):
        health_stall.main(["--profile-native", "--no-profile"])


def _loop_samples(tmp_path: Path) -> Path:
    """The server's own sampler: the loop runs 3 ms in routing at 50.10 and 4 ms in C at 50.12; a lane
    runs 9 ms at 50.12; a sample at 50.30 falls after the probe."""
    lines = [
        {"t": 50.10, "wait_ms": 1.0, "threads": [{"name": "loop", "cpu_ms": 3.0, "stack": ["Route.matches (routing.py:255)"]}]},
        {"t": 50.12, "wait_ms": 9.5, "threads": [{"name": "loop", "cpu_ms": 4.0, "stack": []},
                                                 {"name": "preprocess", "cpu_ms": 9.0, "stack": ["encode (tok.py:1)"]}]},
        {"t": 50.30, "wait_ms": 0.1, "threads": [{"name": "loop", "cpu_ms": 50.0, "stack": ["later (x.py:1)"]}]},
    ]
    path = tmp_path / "server.loop.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_the_in_server_sampler_gives_each_threads_cpu_during_the_slowest_probes(tmp_path: Path):
    samples = attribution.load_cpu_samples(_loop_samples(tmp_path))
    slow = attribution.attribute([Probe(50.09, 50.17, 80.0, 200)], [])
    s = attribution.summary(slow, samples=samples)
    assert s["slowest"][0]["in_server"] == [
        {"thread": "loop", "cpu_ms": 7.0,
         "frames": [[attribution.NO_PYTHON_FRAME, 4.0], ["Route.matches (routing.py:255)", 3.0]]},
        {"thread": "preprocess", "cpu_ms": 9.0, "frames": [["encode (tok.py:1)", 9.0]]},
    ]
    text = report.attribution_section({"v3": {"probes.jsonl": s | {"profiled": True}}})
    assert ("the 80 ms probe, CPU per thread from the server's own sampler: loop 7.0 ms"
            " (`(no Python frame: uvloop's C code)` 4.0 ms, `Route.matches (routing.py:255)` 3.0 ms);"
            " preprocess 9.0 ms (`encode (tok.py:1)` 9.0 ms)") in text
    # No sampler file (a stock arm's server, or an older run): no in-server entry.
    assert attribution.load_cpu_samples(tmp_path / "missing.loop.jsonl") == []
    assert "in_server" not in attribution.summary(slow)["slowest"][0]


def test_the_loop_thread_is_named_as_the_sampler_names_it():
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "sglang_server" / "in_container"))
    import loop_sampler

    assert attribution.SAMPLED_LOOP == loop_sampler.LOOP_NAME


def test_a_cut_sampler_line_is_an_error_naming_the_file_and_line(tmp_path: Path):
    path = _loop_samples(tmp_path)
    path.write_text(path.read_text() + '{"t": 51.0, "threads": [{"name": "loop"\n')
    with pytest.raises(ResultsError, match=r"server\.loop\.jsonl:4: not a loop sampler record"):
        attribution.load_cpu_samples(path)
