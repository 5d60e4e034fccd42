"""Mixed-traffic shaping: error classes, prompts against the baseline, dispatch delays, the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab import report, traffic
from lab.results import ResultsError


@pytest.mark.parametrize("record, expected", [
    ({"status": 200, "error": None}, None),
    ({"status": 500, "error": "HTTP 500: b'{\"message\": \"RuntimeError: Already borrowed\"}'"}, "already_borrowed"),
    ({"status": 400, "error": "HTTP 400: b'bad'"}, "http_400"),
    ({"status": 0, "error": "ConnectionResetError: [Errno 104]"}, "connection:ConnectionResetError"),
    ({"status": 0, "error": "TimeoutError: timed out"}, "timeout"),
    ({"kind": "tool", "error": "still running"}, "no_answer"),
    ({"status": 200, "error": "no prompt_tokens in the answer"}, "http_200"),
])
def test_every_failure_has_a_class(record, expected):
    assert traffic.error_class(record) == expected


def _arm(root: Path, name: str, arrivals: list[dict], records: list[dict], log: str = "") -> Path:
    arm = root / name
    arm.mkdir()
    (arm / "vision-server.scheduler.jsonl").write_text(
        "".join(json.dumps({"kind": "TokenizedGenerateReqInput", **a}) + "\n" for a in arrivals))
    (arm / "mixed_probes.jsonl").write_text("".join(
        json.dumps({"start": t, "end": t + ms / 1000, "ms": ms, "status": 200, "error": None}) + "\n"
        for t, ms in [(10.0, 2.0), (10.5, 35.0), (11.0, 3.0)]))
    (arm / "vision-server.log").write_text(log)
    (arm / "session.json").write_text(json.dumps({"requests": [], "mixed": {
        "start": 10.0, "end": 12.0, "probe_file": "mixed_probes.jsonl",
        "scheduler_log": "vision-server.scheduler.jsonl", "server_log": "vision-server.log", "requests": records}}))
    return arm


def test_mixed_stats_compare_prompts_with_the_baseline_and_time_small_chats(tmp_path: Path):
    records = [
        {"name": "tool_0", "kind": "tool", "status": 200, "error": None, "sent": 10.0},
        {"name": "tool_1", "kind": "tool", "status": 200, "error": None, "sent": 10.1},
        {"name": "tool_2", "kind": "tool", "status": 500, "error": "HTTP 500: Already borrowed", "sent": 10.2},
        {"name": "small_0", "kind": "small", "status": 200, "error": None, "sent": 10.3},
        {"name": "image_0", "kind": "image_chat", "status": 200, "error": None, "sent": 10.4},
        {"name": "image_1", "kind": "image_chat", "status": 200, "error": None, "sent": 10.4},
        {"name": "image_2", "kind": "large_images", "status": 200, "error": None, "sent": 10.4},
    ]
    image = {"received_at": 10.9, "input_ids": 600, "input_sha256": "i", "mm_items": 2}
    stock = _arm(tmp_path, "stock", [
        {"rid": "tool_0", "received_at": 10.5, "input_ids": 9, "input_sha256": "a"},
        {"rid": "tool_1", "received_at": 10.6, "input_ids": 9, "input_sha256": "b"},
        {"rid": "tool_2", "received_at": 10.7, "input_ids": 9, "input_sha256": "c"},
        {"rid": "small_0", "received_at": 11.3, "input_ids": 3, "input_sha256": "d"},
        dict(image, rid="image_0", mm_feature_sha256="f0"),
        dict(image, rid="image_1", mm_feature_sha256="f1"),
        dict(image, rid="image_2", mm_feature_sha256="f2")], records[:2] + [
        dict(records[2], status=200, error=None)] + records[3:])
    v3 = _arm(tmp_path, "v3", [
        {"rid": "tool_0", "received_at": 10.5, "input_ids": 9, "input_sha256": "a"},
        {"rid": "tool_1", "received_at": 10.6, "input_ids": 11, "input_sha256": "flattened"},
        {"rid": "small_0", "received_at": 10.31, "input_ids": 3, "input_sha256": "d"},
        dict(image, rid="image_0", mm_feature_sha256="f0"),
        # Same prompt, other pixels: a child that processed the images differently.
        dict(image, rid="image_1", mm_feature_sha256="other"),
        dict(image, rid="image_2")], records,  # an older fake scheduler: no feature digest
        log="x RuntimeError: Already borrowed\nfine\nAlready borrowed again\n")

    base = traffic.mixed_stats(stock, stock)
    assert base.errors == {} and base.tool_prompts.equal == 3 and base.tool_prompts.changed == 0
    assert (base.image_requests.equal, base.image_requests.changed, base.image_requests.unknown) == (3, 0, 0)
    assert base.small_chat_dispatch.worst_ms == pytest.approx(1000.0)

    m = traffic.mixed_stats(v3, stock)
    assert m.errors == {"already_borrowed": 1}
    assert m.answered_ok == 6 and m.requests == 7
    assert (m.image_requests.equal, m.image_requests.changed, m.image_requests.unknown) == (1, 1, 1)
    assert m.image_requests.changed_names == ["image_1"]
    assert m.server_log_already_borrowed == 2
    assert (m.tool_prompts.equal, m.tool_prompts.changed, m.tool_prompts.unknown) == (1, 1, 1)
    assert m.tool_prompts.changed_names == ["tool_1"]
    assert m.small_chat_dispatch.worst_ms == pytest.approx(10.0)
    assert (m.worst_ms, m.probes_over_20ms, m.probes) == (35.0, 1, 3)

    table = report.mixed_table({"stock": base, "v3": m}, "stock", 4)
    assert "| v3 | 6 / 7 | already_borrowed: 1 | 2 | 35 ms / 3.0 ms / 35 ms | 1 / 3 | 1 / 1 / 1 | 1 / 1 / 1 | 10 ms / 10 ms / 10 ms |" in table


def test_dispatch_of_one_at_a_time_requests(tmp_path: Path):
    arm = tmp_path / "a"
    arm.mkdir()
    (arm / "server.scheduler.jsonl").write_text(
        json.dumps({"kind": "TokenizedGenerateReqInput", "rid": "small", "received_at": 5.04, "input_ids": 3}) + "\n")
    (arm / "session.json").write_text(json.dumps({"requests": [{"name": "small", "sent": 5.0}, {"name": "lost", "sent": 5.0}]}))
    dispatch = traffic.request_dispatch(arm)
    assert dispatch == {"small": pytest.approx(40.0), "lost": None}
    assert "| lost | never arrived |" in report.dispatch_table({"a": dispatch}, ("a",))


def test_missing_scheduler_log_is_an_error(tmp_path: Path):
    with pytest.raises(ResultsError, match="missing"):
        traffic.load_arrivals(tmp_path / "none.jsonl")


def test_targets_table_marks_met_missed_and_unmeasured():
    def stats(worst, tokens=100):
        return {"worst_ms": worst, "p50_ms": 1.0, "p99_ms": worst, "probes": 3, "over_3s": 0, "prompt_tokens": tokens}

    results = {"requests": [
        {"name": "chat_4.7MB", "stock": stats(4000.0), "v3": stats(8.0)},
        {"name": "generate_5MB", "stock": stats(3000.0), "v3": stats(9.0, tokens=99)},
        {"name": "multimodal_64x9MP", "stock": stats(900.0), "v3": stats(25.0)},
    ]}
    dispatch = {"stock": {"small_chat_during_5MB": 4000.0}, "v3": {"small_chat_during_5MB": 12.0}}
    mixed = {"v3": {"errors": {}, "server_log_already_borrowed": 0, "worst_ms": 15.0,
                    "tool_prompts": {"equal": 5, "changed": 0, "unknown": 0},
                    "image_requests": {"equal": 3, "changed": 0, "unknown": 0}}}
    def design(remainder_ms: float, ms: float) -> dict:
        return {"probes": 9, "sampled": 9, "worst": [], "worst_remainder": {"ms": ms, "remainder_ms": remainder_ms}}

    # The design's own delay: the largest remainder over each group's windows.
    results["worst_probes"] = {"v3": {"chat_4.7MB": design(6.0, 8.0), "generate_5MB": design(11.0, 12.0),
                                      "multimodal_64x9MP": design(4.0, 25.0), "mixed": design(15.0, 41.0)}}
    table = report.targets_table(results, dispatch, mixed, ("stock", "v3"), "stock")
    assert ("| design's own delay (/health minus host waits and steal), text requests | <= 10 ms | not measured"
            " | 11.0 ms (of a 12.0 ms probe) (MISSED) |") in table
    assert "| design's own delay, image requests | <= 20 ms | not measured | 4.0 ms (of a 25.0 ms probe) (met) |" in table
    assert "| design's own delay, mixed traffic | <= 20 ms | not measured | 15.0 ms (of a 41.0 ms probe) (met) |" in table
    assert "| worst /health, 4.7 MB chat | <= 10 ms, prompt tokens = stock | 4,000.0 ms, prompt tokens = stock (MISSED) | 8.0 ms, prompt tokens = stock (met) |" in table
    assert "9.0 ms, prompt tokens != stock (MISSED)" in table  # fast but a different prompt
    assert "25.0 ms (MISSED)" in table
    assert "| worst /health, 16 x 48 MP images | <= 20 ms | not measured | not measured |" in table
    assert "| mixed traffic | 0 errors, 0 changed prompts, worst <= 20 ms | not measured | 0 errors" in table
    assert "12.0 ms (met)" in table and "4,000.0 ms (MISSED)" in table
