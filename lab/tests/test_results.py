"""Results shaping: windows, percentiles, misses, the agreed results.json shape, the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab import checks, report, results
from lab.results import Probe


def probes_from(latencies_ms: list[float], period_s: float = 0.2, status: int = 200) -> list[Probe]:
    """Sequential probes as the prober makes them: the next starts when the last returns."""
    out, t = [], 100.0
    for ms in latencies_ms:
        out.append(Probe(t, t + ms / 1000.0, ms, status))
        t = max(t + period_s, t + ms / 1000.0)
    return out


def test_a_stuck_probe_that_began_before_the_request_counts():
    probes = [Probe(10.0, 15.0, 5000.0, 200), Probe(15.0, 15.002, 2.0, 200), Probe(20.0, 20.002, 2.0, 200)]
    stats = results.request_stats(probes, sent=11.0, done=15.5, prompt_tokens=7)
    assert stats.worst_ms == 5000.0
    assert stats.probes == 2  # the 20.0 probe is after the request
    assert stats.over_3s == 1
    assert stats.prompt_tokens == 7


def test_percentiles_are_nearest_rank():
    values = [float(v) for v in range(1, 101)]
    assert results.percentile(values, 50) == 50.0
    assert results.percentile(values, 99) == 99.0
    assert results.percentile([7.0], 99) == 7.0
    with pytest.raises(results.ResultsError):
        results.percentile([], 50)


def test_no_probe_in_the_window_is_an_error_not_a_zero():
    with pytest.raises(results.ResultsError, match="no probe overlaps"):
        results.request_stats([Probe(1.0, 1.1, 100.0, 200)], sent=5.0, done=6.0, prompt_tokens=1)


def test_miss_runs_count_timeouts_errors_and_slow_probes():
    probes = probes_from([2, 3500, 3500, 3500, 2, 3500, 2]) + [Probe(999.0, 999.1, 100.0, 0, "timeout")]
    assert results.miss_runs(probes) == [3, 1, 1]


def test_flood_marks_unhealthy_after_three_consecutive_misses():
    probes = probes_from([2, 2, 3001, 3001, 3001, 3001, 2, 3001, 3001, 3001, 2])
    start = probes[0].start
    stats = results.flood_stats(probes, start, probes[-1].end, [{"status": 200}, {"status": 0, "error": "x"}])
    assert stats.unhealthy_runs == 2
    assert stats.longest_miss_run == 4
    assert stats.first_unhealthy_s is not None and stats.first_unhealthy_s > 0
    assert (stats.requests_sent, stats.requests_ok) == (2, 1)

    healthy = results.flood_stats(probes_from([2] * 20), 100.0, 200.0, [])
    assert healthy.unhealthy_runs == 0 and healthy.first_unhealthy_s is None


def _stats(worst: float, tokens: int = 679634) -> results.ArmStats:
    return results.ArmStats(worst_ms=worst, p50_ms=2.0, p99_ms=worst, probes=5, over_3s=int(worst > 3000), prompt_tokens=tokens)


def test_combine_has_exactly_the_agreed_shape():
    per_arm = {"stock": {"chat_4.7MB": _stats(4961.0)}, "v3": {"chat_4.7MB": _stats(30.0)}}
    summary = results.combine(per_arm)
    results.validate(summary)
    assert list(summary) == ["requests"]
    assert set(summary["requests"][0]) == {"name", "stock", "v3"}
    assert set(summary["requests"][0]["v3"]) == {"worst_ms", "p50_ms", "p99_ms", "probes", "over_3s", "prompt_tokens"}
    json.dumps(summary)  # plain JSON types only


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda s: s.update(extra=1), "top level"),
        (lambda s: s["requests"][0].pop("v3"), "keys"),
        (lambda s: s["requests"][0]["stock"].pop("p99_ms"), "keys"),
        (lambda s: s["requests"][0]["stock"].update(probes=5.0), "probes"),
        (lambda s: s["requests"][0]["stock"].update(worst_ms=5), "worst_ms"),
        (lambda s: s["requests"][0]["stock"].update(prompt_tokens=True), "prompt_tokens"),
    ],
)
def test_validate_rejects_other_shapes(mutate, message):
    summary = results.combine({"stock": {"a": _stats(4000.0)}, "v3": {"a": _stats(20.0)}})
    mutate(summary)
    with pytest.raises(results.ResultsError, match=message):
        results.validate(summary)


def test_combine_refuses_arms_that_ran_different_requests():
    with pytest.raises(results.ResultsError, match="ran"):
        results.combine({"stock": {"a": _stats(1.0)}, "v3": {"b": _stats(1.0)}})


def test_arm_stats_from_files(tmp_path: Path):
    arm = tmp_path / "stock"
    arm.mkdir()
    lines = [json.dumps({"start": p.start, "end": p.end, "ms": p.ms, "status": 200, "error": None})
             for p in probes_from([2, 2, 4000, 2])]
    (arm / "probes.jsonl").write_text("\n".join(lines) + "\n" + '{"start": 1')  # killed mid-line
    (arm / "session.json").write_text(json.dumps({"requests": [
        {"name": "chat_4.7MB", "sent": 100.3, "done": 104.5, "prompt_tokens": 679634, "error": None}]}))
    stats = results.arm_request_stats(arm)
    assert stats["chat_4.7MB"].worst_ms == 4000.0
    assert stats["chat_4.7MB"].probes == 2


def test_a_failed_request_is_an_error(tmp_path: Path):
    (tmp_path / "probes.jsonl").write_text("")
    (tmp_path / "session.json").write_text(json.dumps({"requests": [
        {"name": "x", "sent": 1.0, "done": 2.0, "prompt_tokens": None, "error": "HTTP 400"}]}))
    with pytest.raises(results.ResultsError, match="HTTP 400"):
        results.arm_request_stats(tmp_path)


# v3's counters when both large prompts went through the tokenizer child (lab/tests/test_offload.py
# has the offload part's failures).
V3_OFFLOAD = {"metrics_enabled": True, "reason": None, "phases": {"text": {
    "server": "server", "requests": 2, "large_prompts": 2, "large_bodies": 2, "image_requests": 0, "counters": "present",
    "delta": {"tokenizer_process.uses": 2, "tokenizer_process.fallbacks": 0}, "queue_depth_after": {}}}}


def test_quick_rule():
    def summary(stock_worst: float, v3_worst: float, v3_tokens: int = 679634) -> dict:
        out = results.combine({
            "stock": {name: _stats(stock_worst) for name in checks.QUICK_REQUESTS},
            "v3": {name: _stats(v3_worst, v3_tokens) for name in checks.QUICK_REQUESTS},
        })
        out["offload"] = {"v3": V3_OFFLOAD}
        results.validate(out)
        return out

    assert checks.quick_failures(summary(4961.0, 40.0)) == []
    # stock against stock: both arms stall, so the rule must fail
    assert len(checks.quick_failures(summary(4961.0, 4800.0))) == 2
    assert any("stock worst" in f for f in checks.quick_failures(summary(900.0, 40.0)))
    assert any("prompt_tokens differ" in f for f in checks.quick_failures(summary(4961.0, 40.0, v3_tokens=1)))
    assert any("not in results" in f for f in checks.quick_failures({"requests": []}))


def test_table_and_chart(tmp_path: Path):
    summary = results.combine({"stock": {"chat_4.7MB": _stats(4961.0)}, "v3": {"chat_4.7MB": _stats(31.0)}})
    table = report.markdown_table(summary)
    assert "| chat_4.7MB | 679,634 | **4,961 ms** | **31 ms** |" in table
    probes = {"stock": probes_from([2, 4961, 2]), "v3": probes_from([2, 31, 2])}
    windows = {arm: [("chat_4.7MB", p[1].start, p[1].end)] for arm, p in probes.items()}
    report.request_chart(tmp_path / "c.png", probes, windows, "t")
    report.timeline_chart(tmp_path / "t.png", probes, windows, "t")
    for name in ("c.png", "t.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_request_between_two_probes_gets_the_next_one():
    probes = [Probe(1.0, 1.002, 2.0, 200), Probe(1.012, 1.015, 3.0, 200)]
    stats = results.request_stats(probes, sent=1.003, done=1.009, prompt_tokens=31)
    assert (stats.probes, stats.worst_ms) == (1, 3.0)


# The slowest probe of each arm's 5 MB /generate in a quick run (2026-12-06, 2 shared cores), as
# prober.py wrote them with --loop-pid: the server's loop thread's schedstat [ns on CPU, ns
# waiting on a runqueue, timeslices] before and after the probe.
RECORDED = [
    '{"start": 12136.55498791, "end": 12140.82966881, "ms": 4274.680900000021, "status": 200, "error": null,'
    ' "loop_sched": [[15711122308, 10847247129, 4697], [19644305188, 11149653208, 6104]]}',
    '{"start": 12190.904658148, "end": 12190.921069695, "ms": 16.411546999734128, "status": 200, "error": null,'
    ' "loop_sched": [[15522431324, 12430547526, 6499], [15536250035, 12432677225, 6516]]}',
]


def test_recorded_probes_split_into_runqueue_wait_and_remainder(tmp_path: Path):
    (tmp_path / "probes.jsonl").write_text("\n".join(RECORDED) + "\n")
    stock, v3 = [results.split_probe(p) for p in results.load_probes(tmp_path / "probes.jsonl")]
    # stock: 302.4 ms waiting for a CPU, the loop ran 3,933 ms itself (tokenizing on the loop)
    assert stock == results.ProbeSplit(ms=4274.7, runqueue_ms=302.4, loop_cpu_ms=3933.2, remainder_ms=3972.3)
    # v3: 2.1 ms of the 16.4 ms was the host's, 14.3 ms the server's own
    assert v3 == results.ProbeSplit(ms=16.4, runqueue_ms=2.1, loop_cpu_ms=13.8, remainder_ms=14.3)


def test_a_wait_that_began_before_the_probe_is_capped_at_its_latency():
    # The kernel adds a wait when it ends: 80 ms credited inside a 50 ms probe.
    probe = Probe(10.0, 10.050, 50.0, 200, loop_sched=((0, 0, 1), (1_000_000, 80_000_000, 2)))
    assert results.split_probe(probe) == results.ProbeSplit(50.0, 50.0, 1.0, 0.0)


def test_the_probers_own_wait_is_split_off_too():
    # Loop idle in epoll (1 ms on CPU, no wait) while the prober waited 50 ms for a CPU: 60 ms of
    # /health, 10 ms of it the design's.
    probe = Probe(10.0, 10.060, 60.0, 200, loop_sched=((0, 0, 1), (1_000_000, 0, 2)),
                  prober_sched=((0, 0, 1), (2_000_000, 50_000_000, 3)))
    assert results.split_probe(probe) == results.ProbeSplit(60.0, 0.0, 1.0, 10.0, 50.0)
    # Both capped: the two waits never exceed the probe.
    probe = Probe(10.0, 10.050, 50.0, 200, loop_sched=((0, 0, 1), (0, 30_000_000, 2)),
                  prober_sched=((0, 0, 1), (0, 40_000_000, 2)))
    assert results.split_probe(probe) == results.ProbeSplit(50.0, 30.0, 0.0, 0.0, 20.0)
    with pytest.raises(results.ResultsError, match="prober schedstat went backwards"):
        results.split_probe(Probe(1.0, 1.2, 200.0, 200, loop_sched=((0, 0, 1), (0, 0, 1)),
                                  prober_sched=((5, 5, 1), (5, 4, 1))))


def test_the_loops_page_faults_and_kernel_time_are_split_off():
    # 38 ms on CPU, 30 ms of it (three ticks) in the kernel, over 9,000 faults: memory work.
    probe = Probe(10.0, 10.060, 60.0, 200, loop_sched=((0, 0, 1), (38_000_000, 0, 2)),
                  loop_stat=((100, 0, 1000, 500), (9_100, 2, 1010, 530)))
    split = results.split_probe(probe)
    assert (split.loop_cpu_ms, split.loop_faults, split.loop_kernel_ms) == (38.0, 9_002, 30.0)
    with pytest.raises(results.ResultsError, match="loop stat went backwards"):
        results.split_probe(Probe(1.0, 1.2, 200.0, 200, loop_stat=((5, 0, 1, 1), (4, 0, 1, 1))))


def test_the_hosts_steal_is_split_off_the_remainder():
    # 120 ms: the loop waited 20 ms for a CPU and ran 90 ms, 70 ms of them on a virtual CPU the
    # hypervisor had taken away (CPU 1's steal grew 70 ms; CPU 0's 10 ms).
    probe = Probe(10.0, 10.12, 120.0, 200, loop_sched=((0, 0, 1), (90_000_000, 20_000_000, 5)),
                  steal=((500, 300), (510, 370)))
    split = results.split_probe(probe)
    assert (split.host_steal_ms, split.remainder_ms) == (70.0, 30.0)
    # A steal tick at the probe's edge can outrun what is left: capped, the remainder never < 0.
    edge = Probe(10.0, 10.02, 20.0, 200, loop_sched=((0, 0, 1), (1_000_000, 15_000_000, 2)),
                 steal=((0,), (10,)))
    assert (results.split_probe(edge).host_steal_ms, results.split_probe(edge).remainder_ms) == (5.0, 0.0)
    with pytest.raises(results.ResultsError, match="steal went backwards"):
        results.split_probe(Probe(1.0, 1.2, 200.0, 200, steal=((5, 5), (4, 6))))


def test_a_probe_without_samples_is_not_split():
    assert results.split_probe(Probe(1.0, 1.2, 200.0, 200)) == results.ProbeSplit(200.0, None, None, None)
    with pytest.raises(results.ResultsError, match="backwards"):
        results.split_probe(Probe(1.0, 1.2, 200.0, 200, loop_sched=((5, 5, 1), (4, 5, 1))))


def test_worst_probes_from_files_with_the_mixed_phase(tmp_path: Path):
    lines = [
        {"start": 100.0, "end": 100.002, "ms": 2.0, "status": 200, "error": None,
         "loop_sched": [[0, 0, 1], [1_000_000, 0, 2]]},
        {"start": 100.2, "end": 100.3, "ms": 100.0, "status": 200, "error": None,
         "loop_sched": [[1_000_000, 0, 2], [61_000_000, 40_000_000, 9]],
         "loop_stat": [[500, 1, 100, 20], [12_499, 2, 120, 60]], "steal": [[0, 30], [20, 40]]},
        {"start": 100.4, "end": 100.41, "ms": 10.0, "status": 200, "error": None, "loop_sched": None},
    ]
    (tmp_path / "probes.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (tmp_path / "session.json").write_text(json.dumps({
        "requests": [{"name": "chat_4.7MB", "sent": 100.1, "done": 100.5, "prompt_tokens": 9, "error": None}],
        "mixed": {"start": 99.0, "end": 101.0, "probe_file": "probes.jsonl"}}))
    worst = results.arm_worst_probes(tmp_path)
    assert worst["chat_4.7MB"] == {"probes": 2, "sampled": 1, "worst": [
        {"ms": 100.0, "runqueue_ms": 40.0, "loop_cpu_ms": 60.0, "remainder_ms": 40.0, "prober_runqueue_ms": None,
         "loop_faults": 12_000, "loop_kernel_ms": 40.0, "host_steal_ms": 20.0},
        {"ms": 10.0, "runqueue_ms": None, "loop_cpu_ms": None, "remainder_ms": None, "prober_runqueue_ms": None,
         "loop_faults": None, "loop_kernel_ms": None, "host_steal_ms": None}],
        # The largest design delay among the split probes (the 10 ms one has no samples).
        "worst_remainder": {"ms": 100.0, "runqueue_ms": 40.0, "loop_cpu_ms": 60.0, "remainder_ms": 40.0,
                            "prober_runqueue_ms": None, "loop_faults": 12_000, "loop_kernel_ms": 40.0,
                            "host_steal_ms": 20.0}}
    assert (worst["mixed"]["probes"], worst["mixed"]["sampled"]) == (3, 2)
    # Over every split probe, not only the `count` slowest ones.
    assert results.worst_probes(results.load_probes(tmp_path / "probes.jsonl")[:1], count=0) == {
        "probes": 1, "sampled": 1, "worst": [], "worst_remainder": results.worst_probes(
            results.load_probes(tmp_path / "probes.jsonl")[:1])["worst"][0]}

    summary = results.combine({"stock": {"chat_4.7MB": _stats(4000.0)}, "v3": {"chat_4.7MB": _stats(100.0)}})
    summary["worst_probes"] = {"stock": worst, "v3": worst}
    results.validate(summary)
    table = report.worst_probes_table(summary["worst_probes"], ("stock", "v3"))
    assert "| chat_4.7MB | v3 | 1 | 100 ms | 40 ms | - | 20 ms | 40 ms | 60 ms | 40 ms | 12,000 | 1 / 2 |" in table
    assert "| mixed | stock | 3 | 2.0 ms | 0.0 ms | - | - | 2.0 ms | 1.0 ms | - | - | 2 / 3 |" in table

    summary["worst_probes"]["v3"]["chat_4.7MB"]["worst"][0]["runqueue_ms"] = 40
    with pytest.raises(results.ResultsError, match="runqueue_ms"):
        results.validate(summary)
    summary["worst_probes"]["v3"]["chat_4.7MB"]["worst"][0].pop("runqueue_ms")
    with pytest.raises(results.ResultsError, match="keys"):
        results.validate(summary)
    # The design-delay split is checked too, and the error names it.
    fresh = results.arm_worst_probes(tmp_path)
    fresh["chat_4.7MB"]["worst_remainder"]["loop_faults"] = 1.5
    summary["worst_probes"] = {"stock": fresh, "v3": fresh}
    with pytest.raises(results.ResultsError, match=r"chat_4\.7MB\.worst_remainder\.loop_faults"):
        results.validate(summary)
