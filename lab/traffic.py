"""Shapes the mixed-traffic phase and the dispatch delays into per-arm numbers.

Inputs per arm: session.json (every request's send/answer times, status, error text), the
fake scheduler's log (when each request id reached it, the sha256 of its input ids) and the
server log. The baseline arm (stock) gives the reference prompts: a tool request whose input
ids differ from the baseline's got a different prompt (serving_chat's retry with flattened
tools after an exception is the known cause), and an image request whose ids or features
(as the scheduler read them) differ got different image processing (v3 runs the processor in
child processes; stock runs it in the server process).

Pure functions over plain data, unit-tested on the host.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from lab.results import ResultsError, load_probes, overlapping, percentile

ALREADY_BORROWED = "Already borrowed"
SLOW_MS = 20.0


@dataclass(frozen=True)
class Arrival:
    received_at: float
    input_ids: int
    input_sha256: str | None
    mm_items: int = 0
    mm_feature_sha256: str | None = None


@dataclass(frozen=True)
class Delays:
    count: int
    p50_ms: float
    p99_ms: float
    worst_ms: float


@dataclass(frozen=True)
class PromptCheck:
    """Requests against the baseline arm: equal (input ids and features), changed, or unknown
    (either side has no digest)."""

    equal: int
    changed: int
    unknown: int
    changed_names: list[str]


@dataclass(frozen=True)
class MixedStats:
    requests: int
    answered_ok: int
    errors: dict[str, int]  # error class -> count; empty means no error of any class
    server_log_already_borrowed: int  # lines of the server log, including errors a retry hid
    probes: int
    worst_ms: float
    p50_ms: float
    p99_ms: float
    probes_over_20ms: int
    tool_prompts: PromptCheck
    image_requests: PromptCheck  # requests that carried images: ids and features
    small_chat_dispatch: Delays | None


def error_class(record: dict) -> str | None:
    """None for a 200 answer with prompt tokens; otherwise a short class name for the failure."""
    error = record.get("error")
    if record.get("status") == 200 and not error:
        return None
    text = str(error or "")
    if ALREADY_BORROWED in text:
        return "already_borrowed"
    if text == "still running":
        return "no_answer"
    if "timed out" in text or text.startswith("timeout"):
        return "timeout"
    status = record.get("status") or 0
    if status:
        return f"http_{status}"
    return "connection:" + (text.split(":", 1)[0] or "unknown")


def load_arrivals(path: Path) -> dict[str, Arrival]:
    """rid -> first arrival of a generate request at the fake scheduler."""
    arrivals: dict[str, Arrival] = {}
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise ResultsError(f"{path}: missing; the fake scheduler logged nothing (see the server log)") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except ValueError as err:
            raise ResultsError(f"{path}:{number}: not JSON ({err})") from None
        rid = raw.get("rid")
        if raw.get("kind") == "TokenizedGenerateReqInput" and isinstance(rid, str) and rid not in arrivals:
            arrivals[rid] = Arrival(float(raw["received_at"]), int(raw.get("input_ids", 0)), raw.get("input_sha256"),
                                    int(raw.get("mm_items", 0)), raw.get("mm_feature_sha256"))
    return arrivals


def dispatch_ms(record: dict, arrivals: dict[str, Arrival]) -> float | None:
    """Milliseconds from the client's send to the scheduler's receipt; None if it never arrived."""
    arrival = arrivals.get(record.get("name", ""))
    if arrival is None or not record.get("sent"):
        return None
    return round((arrival.received_at - record["sent"]) * 1000.0, 1)


def delays(values: list[float]) -> Delays | None:
    if not values:
        return None
    return Delays(len(values), round(percentile(values, 50), 1), round(percentile(values, 99), 1), round(max(values), 1))


def prompt_check(names: list[str], arrivals: dict[str, Arrival], baseline: dict[str, Arrival],
                 features: bool = False) -> PromptCheck:
    """`features`: the requests carry images, so their feature digests must be known and equal too."""
    equal = changed = unknown = 0
    changed_names = []

    def key(a: Arrival) -> tuple:
        return (a.input_sha256, a.input_ids, a.mm_feature_sha256)

    for name in names:
        mine, theirs = arrivals.get(name), baseline.get(name)
        if mine is None or theirs is None or mine.input_sha256 is None or theirs.input_sha256 is None \
                or (features and (mine.mm_feature_sha256 is None or theirs.mm_feature_sha256 is None)):
            unknown += 1
        elif key(mine) == key(theirs):
            equal += 1
        else:
            changed += 1
            changed_names.append(name)
    return PromptCheck(equal, changed, unknown, changed_names)


def count_in_log(path: Path, needle: str) -> int:
    try:
        return sum(1 for line in path.read_text(errors="replace").splitlines() if needle in line)
    except FileNotFoundError:
        raise ResultsError(f"{path}: missing server log") from None


def mixed_stats(arm_dir: Path, baseline_dir: Path) -> MixedStats:
    """The mixed phase of one arm, its tool prompts checked against the baseline arm's."""
    session = json.loads((arm_dir / "session.json").read_text())
    mixed = session.get("mixed")
    if not mixed:
        raise ResultsError(f"{arm_dir / 'session.json'}: no mixed-traffic record")
    records = mixed["requests"]
    arrivals = load_arrivals(arm_dir / mixed["scheduler_log"])
    baseline_session = json.loads((baseline_dir / "session.json").read_text())
    baseline = load_arrivals(baseline_dir / (baseline_session.get("mixed") or mixed)["scheduler_log"])
    probes = overlapping(load_probes(arm_dir / mixed["probe_file"]), mixed["start"], mixed["end"])
    if not probes:
        raise ResultsError(f"{arm_dir / mixed['probe_file']}: no probe during the mixed phase")
    classes = Counter(c for c in (error_class(r) for r in records) if c is not None)
    tools = [r["name"] for r in records if r.get("kind") == "tool"]
    # Image requests: those that reached either arm's scheduler with multimodal items.
    images = [r["name"] for r in records
              if any(getattr(side.get(r["name"]), "mm_items", 0) for side in (arrivals, baseline))]
    small = [d for d in (dispatch_ms(r, arrivals) for r in records if r.get("kind") == "small") if d is not None]
    ms = [p.ms for p in probes]
    return MixedStats(
        requests=len(records),
        answered_ok=sum(1 for r in records if error_class(r) is None),
        errors=dict(sorted(classes.items())),
        server_log_already_borrowed=count_in_log(arm_dir / mixed["server_log"], ALREADY_BORROWED),
        probes=len(probes),
        worst_ms=round(max(ms), 1),
        p50_ms=round(percentile(ms, 50), 1),
        p99_ms=round(percentile(ms, 99), 1),
        probes_over_20ms=sum(1 for v in ms if v > SLOW_MS),
        tool_prompts=prompt_check(tools, arrivals, baseline),
        image_requests=prompt_check(images, arrivals, baseline, features=True),
        small_chat_dispatch=delays(small),
    )


SCHEDULER_LOGS = ("server.scheduler.jsonl", "vision-server.scheduler.jsonl")


def request_dispatch(arm_dir: Path) -> dict[str, float | None]:
    """Dispatch delay of every one-at-a-time request (name -> ms; None: never reached the scheduler)."""
    session = json.loads((arm_dir / "session.json").read_text())
    arrivals: dict[str, Arrival] = {}
    for name in SCHEDULER_LOGS:
        if (arm_dir / name).is_file():
            arrivals.update(load_arrivals(arm_dir / name))
    return {r["name"]: dispatch_ms(r, arrivals) for r in session.get("requests", [])}
