"""The v3 engine's offload counters per phase, from the /metrics scrapes in session.json.

session.py scrapes each server's /metrics after its warm-up and after each phase
(tools/sglang_server/in_container/metrics_text.py parses them); a phase's record holds the scrape before and after
it and how many of its prompts were large. Here each phase becomes the counters' deltas:

    {"metrics_enabled": bool, "reason": str | None,
     "phases": {"text": {"server", "requests", "large_prompts", "large_bodies", "image_requests",
                         "counters": "present" | why absent,
                         "delta": {"tokenizer_process.uses": 2, ...} | None,
                         "queue_depth_after": {"tokenizer_process": 0, ...} | None}, ...}}

A counter absent before a phase counts as 0 (a labelled Prometheus counter has no sample until
its first increment). Stock and upstream export no offload counters: "counters" says so and
"delta" is None. Pure functions over plain data, unit-tested on the host.
"""

from __future__ import annotations

PATHS = ("tokenizer_process", "json_process", "preprocessing_lane_bulk", "preprocessing_lane_small", "mm_process")
EVENTS = ("uses", "fallbacks", "deadline_kills", "restarts", "recycles", "start_failures", "rejected", "bypassed")


def _absent_reason(scrape: dict) -> str:
    if scrape.get("error"):
        return str(scrape["error"])
    return "no sglang:offload_events_total on /metrics"


def phase_delta(before: dict, after: dict) -> dict:
    """One phase: the deltas of every counter the after-scrape has (None when it has none)."""
    end = after.get("offload")
    if end is None:
        return {"counters": _absent_reason(after), "delta": None, "queue_depth_after": None}
    start = (before or {}).get("offload") or {"events": {}}
    events = start.get("events") or {}
    delta = {key: value - events.get(key, 0) for key, value in sorted(end.get("events", {}).items())}
    return {"counters": "present", "delta": delta, "queue_depth_after": dict(end.get("queue_depth") or {})}


def arm_offload(session: dict) -> dict:
    """The arm's offload record for results.json, from its session.json."""
    metrics = session.get("metrics") or {}
    if not metrics:
        return {"metrics_enabled": False, "reason": "session.json has no metrics record (a run before the scrapes)",
                "phases": {}}
    phases = {}
    for entry in metrics.get("phases", []):
        phases[entry["phase"]] = {
            "server": entry["server"],
            "requests": int(entry["requests"]),
            "large_prompts": int(entry["large_prompts"]),
            "large_bodies": int(entry["large_bodies"]),
            "image_requests": int(entry.get("image_requests", 0)),  # 0 in sessions from before the count
            **phase_delta(entry.get("before") or {}, entry.get("after") or {}),
        }
    return {"metrics_enabled": bool(metrics.get("enabled")), "reason": metrics.get("reason"), "phases": phases}


def path_events(delta: dict, path: str) -> list:
    """The path's deltas in EVENTS order (0 where the counter never moved)."""
    return [delta.get(f"{path}.{event}", 0) for event in EVENTS]


def offload_failures(results: dict, arm: str = "v3") -> list[str]:
    """The quick rule's offload part: on `arm`, every large prompt of every phase that sent any
    was encoded by the tokenizer child (tokenizer_process.uses grew by at least that many and
    tokenizer_process.fallbacks did not grow), read from the server's own counters."""
    record = (results.get("offload") or {}).get(arm)
    if record is None:
        return [f"{arm}: no offload counters in results.json (no /metrics scrapes recorded for the arm)"]
    large = {name: p for name, p in record.get("phases", {}).items() if p.get("large_prompts", 0) > 0}
    if not large:
        return [f"{arm}: no phase with large prompts was scraped (phases: {sorted(record.get('phases', {}))});"
                f" metrics {'on' if record.get('metrics_enabled') else 'off: ' + str(record.get('reason'))}"]
    failures = []
    for name, phase in large.items():
        sent = phase["large_prompts"]
        delta = phase.get("delta")
        if delta is None:
            failures.append(f"{arm} {name} phase: offload counters missing ({phase.get('counters')});"
                            f" {sent} large prompts sent")
            continue
        fallbacks = delta.get("tokenizer_process.fallbacks", 0)
        uses = delta.get("tokenizer_process.uses", 0)
        if fallbacks > 0:
            failures.append(f"{arm} {name} phase: tokenizer_process.fallbacks +{fallbacks:g}, expected 0"
                            f" ({sent} large prompts sent, tokenizer_process.uses +{uses:g})")
        if uses < sent:
            failures.append(f"{arm} {name} phase: tokenizer_process.uses +{uses:g}, expected >= {sent}"
                            f" (the large prompts sent); fallbacks +{fallbacks:g}")
    return failures


def mm_process_failures(results: dict, arm: str = "v3") -> list[str]:
    """On `arm`, every phase that sent image requests had them processed by the multimodal
    child processes: mm_process.uses grew by at least that many and mm_process.fallbacks did
    not grow. A server that kept its processor in-process (the pool not started) fails here.
    A missing record is offload_failures' to report."""
    record = (results.get("offload") or {}).get(arm) or {}
    failures = []
    for name, phase in record.get("phases", {}).items():
        sent = phase.get("image_requests", 0)
        if not sent:
            continue
        delta = phase.get("delta")
        if delta is None:
            failures.append(f"{arm} {name} phase: offload counters missing ({phase.get('counters')});"
                            f" {sent} image requests sent")
            continue
        uses, fallbacks = delta.get("mm_process.uses", 0), delta.get("mm_process.fallbacks", 0)
        if uses < sent:
            failures.append(f"{arm} {name} phase: mm_process.uses +{uses:g}, expected >= {sent} (the image"
                            " requests sent); the server log says why the pool did not run")
        if fallbacks > 0:
            failures.append(f"{arm} {name} phase: mm_process.fallbacks +{fallbacks:g}, expected 0"
                            f" ({sent} image requests sent)")
    return failures
