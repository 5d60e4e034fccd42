"""The offload counters per phase (lab/offload.py) and the quick rule's offload part."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lab import checks, offload, report, results


def _scrape(events: dict | None, depth: dict | None = None, error: str | None = None, status: int | None = 200) -> dict:
    return {"point": "x", "at": 1.0, "status": status, "error": error, "file": None,
            "offload": None if events is None else {"events": events, "queue_depth": depth or {}}}


def _phase(name: str, before: dict, after: dict, requests: int = 2, large: int = 2, bodies: int = 2,
           images: int = 0) -> dict:
    return {"phase": name, "server": "server", "requests": requests, "large_prompts": large, "large_bodies": bodies,
            "image_requests": images, "before": before, "after": after}


START = {"preprocessing_lane_small.uses": 2}  # the warm-up's two small requests


def _session(*phases: dict, enabled: bool = True, reason: str | None = None) -> dict:
    return {"requests": [], "metrics": {"enabled": enabled, "reason": reason, "large_prompt_chars": 262144,
                                        "large_body_bytes": 1 << 20, "phases": list(phases)}}


def _v3_session(uses: int = 2, fallbacks: int = 0, large: int = 2) -> dict:
    after = {**START, "preprocessing_lane_bulk.uses": 2, "json_process.uses": 2, "tokenizer_process.uses": uses}
    if fallbacks:
        after["tokenizer_process.fallbacks"] = fallbacks
    return _session(_phase("text", _scrape(START), _scrape(after, {"preprocessing_lane_bulk": 0}), large=large),
                    _phase("vision", _scrape(START), _scrape(START), requests=1, large=0, bodies=1))


def _stock_session() -> dict:
    return _session(_phase("text", _scrape(None), _scrape(None)))


def _stats(worst: float) -> results.ArmStats:
    return results.ArmStats(worst_ms=worst, p50_ms=2.0, p99_ms=worst, probes=5, over_3s=0, prompt_tokens=1_234_567)


def _summary(v3_session: dict | None, stock_session: dict | None = None) -> dict:
    summary = results.combine({"stock": {n: _stats(4000.0) for n in checks.QUICK_REQUESTS},
                               "v3": {n: _stats(30.0) for n in checks.QUICK_REQUESTS}})
    summary["offload"] = {"stock": offload.arm_offload(stock_session or _stock_session())}
    if v3_session is not None:
        summary["offload"]["v3"] = offload.arm_offload(v3_session)
    results.validate(summary)
    return summary


def test_deltas_count_a_counter_absent_before_as_zero():
    record = offload.arm_offload(_v3_session())
    text = record["phases"]["text"]
    assert text["counters"] == "present"
    assert text["delta"] == {"json_process.uses": 2, "preprocessing_lane_bulk.uses": 2,
                             "preprocessing_lane_small.uses": 0, "tokenizer_process.uses": 2}
    assert text["queue_depth_after"] == {"preprocessing_lane_bulk": 0}
    assert (text["requests"], text["large_prompts"], text["large_bodies"]) == (2, 2, 2)
    assert record["phases"]["vision"]["delta"] == {"preprocessing_lane_small.uses": 0}
    # before missing entirely (the first scrape failed): every counter counts from 0
    assert offload.phase_delta({}, _scrape({"tokenizer_process.uses": 5}))["delta"] == {"tokenizer_process.uses": 5}


def test_stock_has_no_counters_and_says_why():
    record = offload.arm_offload(_stock_session())
    assert record["phases"]["text"]["delta"] is None
    assert record["phases"]["text"]["counters"] == "no sglang:offload_events_total on /metrics"
    off = offload.arm_offload(_session(_phase("text", _scrape(None, error="metrics off: --no-metrics", status=None),
                                              _scrape(None, error="metrics off: --no-metrics", status=None)),
                                       enabled=False, reason="--no-metrics"))
    assert off["metrics_enabled"] is False and off["phases"]["text"]["counters"] == "metrics off: --no-metrics"
    old = offload.arm_offload({"requests": []})  # a session.json from before the scrapes
    assert old["phases"] == {} and "no metrics record" in old["reason"]


def test_quick_rule_passes_when_every_large_prompt_used_the_child():
    assert checks.quick_failures(_summary(_v3_session())) == []
    # more uses than large prompts is fine (a prompt between 256 Ki characters and the lab's count)
    assert checks.quick_failures(_summary(_v3_session(uses=3))) == []


def test_v3_half_of_the_quick_rule_needs_no_stock_arm():
    # health_stall --arms v3 --check-v3 (//lab:quick_v3_test): v3's bound and counters only
    alone = results.combine({"v3": {n: _stats(30.0) for n in checks.QUICK_REQUESTS}}, ("v3",))
    alone["offload"] = {"v3": offload.arm_offload(_v3_session())}
    results.validate(alone, ("v3",))
    assert checks.quick_failures(alone, baseline=False) == []
    # the whole rule still asks for the stock arm
    assert [f.split(": ", 1)[1] for f in checks.quick_failures(alone)] == \
        ["the quick rule compares the stock and v3 arms; run both (--arms stock,v3)"] * 2
    slow = results.combine({"v3": {n: _stats(300.0) for n in checks.QUICK_REQUESTS}}, ("v3",))
    slow["offload"] = {"v3": offload.arm_offload(_v3_session(fallbacks=1))}
    failures = checks.quick_failures(slow, baseline=False)
    assert failures[:2] == [f"{n}: v3 worst probe 300 ms, expected < 250 ms" for n in checks.QUICK_REQUESTS]
    assert failures[2].startswith("v3 text phase: tokenizer_process.fallbacks +1")
    # with both arms present, stock's results are not judged (here a stock that did not stall)
    both = results.combine({arm: {n: _stats(30.0) for n in checks.QUICK_REQUESTS} for arm in ("stock", "v3")})
    both["offload"] = {"stock": offload.arm_offload(_stock_session()), "v3": offload.arm_offload(_v3_session())}
    assert checks.quick_failures(both, baseline=False) == []
    assert [f for f in checks.quick_failures(both) if "stock worst probe 30 ms" in f]


def test_quick_rule_fails_on_a_fallback():
    (failure,) = checks.quick_failures(_summary(_v3_session(fallbacks=1)))
    assert failure.startswith("v3 text phase: tokenizer_process.fallbacks +1, expected 0")
    assert "2 large prompts sent" in failure


def test_quick_rule_fails_when_uses_fall_short():
    (failure,) = checks.quick_failures(_summary(_v3_session(uses=1)))
    assert failure == "v3 text phase: tokenizer_process.uses +1, expected >= 2 (the large prompts sent); fallbacks +0"


def test_quick_rule_fails_when_a_fallback_also_cost_a_use():
    failures = checks.quick_failures(_summary(_v3_session(uses=1, fallbacks=1)))
    assert len(failures) == 2 and all(f.startswith("v3 text phase:") for f in failures)


def test_quick_rule_fails_when_v3_has_no_counters():
    # the stock image in the v3 arm (--same-image), or a v3 image without prometheus_client
    (failure,) = checks.quick_failures(_summary(_stock_session()))
    assert failure == ("v3 text phase: offload counters missing (no sglang:offload_events_total on /metrics);"
                       " 2 large prompts sent")
    off = _session(_phase("text", _scrape(None, error="metrics off: prometheus_client is not importable", status=None),
                          _scrape(None, error="metrics off: prometheus_client is not importable", status=None)),
                   enabled=False, reason="prometheus_client is not importable")
    (failure,) = checks.quick_failures(_summary(off))
    assert "offload counters missing (metrics off: prometheus_client is not importable)" in failure


def test_quick_rule_fails_without_an_offload_record_or_a_large_phase():
    (failure,) = checks.quick_failures(_summary(None))
    assert failure.startswith("v3: no offload counters in results.json")
    (failure,) = checks.quick_failures(_summary(_session(
        _phase("vision", _scrape(START), _scrape(START), large=0))))
    assert failure.startswith("v3: no phase with large prompts was scraped (phases: ['vision'])")


def test_quick_rule_checks_every_large_phase():
    flood_after = {**START, "tokenizer_process.uses": 2 + 40, "tokenizer_process.fallbacks": 0}
    text_after = {**START, "tokenizer_process.uses": 2}
    session = _session(_phase("text", _scrape(START), _scrape(text_after)),
                       _phase("flood", _scrape(text_after), _scrape(flood_after), requests=45, large=45, bodies=45))
    (failure,) = checks.quick_failures(_summary(session))
    assert failure.startswith("v3 flood phase: tokenizer_process.uses +40, expected >= 45")


def test_results_validate_the_offload_and_tokenizer_shapes():
    summary = _summary(_v3_session())
    summary["tokenizer"] = {"text": {"name": "glm", "vocab_size": 151_552, "backend_json_bytes": 5_437_501}}
    results.validate(summary)
    json.dumps(summary)
    for mutate, message in [
        (lambda s: s["offload"].update(other={}), "offload must map arms"),
        (lambda s: s["offload"]["v3"].pop("reason"), "offload.v3 keys"),
        (lambda s: s["offload"]["v3"]["phases"]["text"].pop("delta"), "phases.text keys"),
        (lambda s: s["offload"]["v3"]["phases"]["text"].update(large_prompts=2.0), "large_prompts"),
        (lambda s: s["tokenizer"]["text"].update(vocab_size="151552"), "vocab_size"),
        (lambda s: s["tokenizer"].update(audio={}), "tokenizer must map"),
    ]:
        broken = json.loads(json.dumps(summary))
        mutate(broken)
        with pytest.raises(results.ResultsError, match=message):
            results.validate(broken)


def test_offload_table():
    summary = _summary(_v3_session(fallbacks=1))
    table = report.offload_table(summary["offload"], ("stock", "v3"))
    zeros = " / ".join(["0"] * 8)
    assert "| stock | text | 2 (2 / 2 / 0) | absent: no sglang:offload_events_total on /metrics | - | - | - | - | - |" in table
    assert f"| v3 | text | 2 (2 / 2 / 0) | 2 / 1 / 0 / 0 / 0 / 0 / 0 / 0 | 2 / 0 / 0 / 0 / 0 / 0 / 0 / 0" \
           f" | 2 / 0 / 0 / 0 / 0 / 0 / 0 / 0 | {zeros} | {zeros} | preprocessing_lane_bulk: 0 |" in table
    assert "| v3 | vision | 1 (0 / 1 / 0) |" in table
    assert "uses / fallbacks / deadline kills / restarts / recycles / start failures / rejected / bypassed" in table
    assert "multimodal process" in table
    assert "| upstream | - | - | not recorded |" in report.offload_table(summary["offload"], ("upstream",))


def test_tokenizer_section():
    manifest = {"name": "glm", "source": "patches/v3/tests/glm_tokenizer.py", "seed": 0, "vocab_size": 151_552,
                "backend_json_bytes": 5_437_501, "tokenizer_json_bytes": 11_492_393, "chat_template": "glm",
                "extra_tokens": []}
    vision = dict(manifest, vocab_size=151_555, extra_tokens=["<start_of_image>", "<image_soft_token>", "<end_of_image>"])
    text = report.tokenizer_section({"text": manifest, "vision": vision})
    assert text.startswith("Tokenizer: **glm**, vocabulary 151,552, backend JSON 5,437,501 bytes (5.2 MiB)")
    assert "| text | glm | 151,552 | 5,437,501 bytes (5.2 MiB) | 11,492,393 bytes (11.0 MiB) | glm | none |" in text
    assert "| vision | glm | 151,555 |" in text and "`<image_soft_token>`" in text
    assert "not recorded" in report.tokenizer_section(None)


def test_tokenizer_manifests_are_loaded_from_the_models_dir(tmp_path: Path):
    assert results.load_tokenizers(tmp_path / "models") is None
    (tmp_path / "models" / "text").mkdir(parents=True)
    (tmp_path / "models" / "text" / "lab_tokenizer.json").write_text(json.dumps({"name": "small"}))
    assert results.load_tokenizers(tmp_path / "models") == {"text": {"name": "small"}}
    (tmp_path / "models" / "text" / "lab_tokenizer.json").write_text("{")
    with pytest.raises(results.ResultsError, match="not JSON"):
        results.load_tokenizers(tmp_path / "models")


def test_image_requests_must_go_through_the_multimodal_processes():
    """The lab's v3 arm once kept every image in the server process (the pool refused a CPU image
    processor) and only the py-spy attribution showed it: the counters now gate it."""
    text_after = {**START, "tokenizer_process.uses": 2}
    kept_here = _session(_phase("text", _scrape(START), _scrape(text_after)),
                         _phase("vision", _scrape(text_after), _scrape(text_after), requests=2, large=0, images=2))
    (failure,) = checks.quick_failures(_summary(kept_here))
    assert failure.startswith("v3 vision phase: mm_process.uses +0, expected >= 2 (the image requests sent)")
    row = checks._mm_process_row(_summary(kept_here), "v3")
    assert row[2].startswith("0 uses for 2 image requests") and row[3] is False
    pooled = {**text_after, "mm_process.uses": 2}
    in_children = _session(_phase("text", _scrape(START), _scrape(text_after)),
                           _phase("vision", _scrape(text_after), _scrape(pooled), requests=2, large=0, images=2))
    assert checks.quick_failures(_summary(in_children)) == []
    assert checks._mm_process_row(_summary(in_children), "v3") == (
        "image requests processed in child processes", "mm_process uses >= image requests, 0 fallbacks",
        "2 uses for 2 image requests", True)
    assert checks._mm_process_row(_summary(in_children), "stock")[3] is None  # stock has no counters
