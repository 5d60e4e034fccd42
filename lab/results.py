"""Shapes the arms' raw probes and request timestamps into results.json and the flood summary.

Pure functions over plain data (no sglang, no podman), so they are unit-tested on the host.

A probe belongs to a request when their intervals overlap: a probe that started before the
request was sent and was stuck until after it arrived counts, as it measured the stall.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

OVER_MS = 3000.0  # a probe slower than this fails a typical 3 s health-check timeout
UNHEALTHY_RUN = 3  # consecutive failed probes that mark a replica unhealthy


class ResultsError(Exception):
    """Raw data missing or inconsistent; the message names the file and what is wrong."""


# One read of /proc/<pid>/task/<tid>/schedstat: time on CPU (ns), time waiting on a runqueue
# (ns), timeslices.
Schedstat = tuple[int, int, int]
# One read of /proc/<pid>/task/<tid>/stat: minor faults, major faults, user ms, kernel ms (the
# times in clock ticks).
ThreadStat = tuple[int, int, int, int]


@dataclass(frozen=True)
class Probe:
    start: float
    end: float
    ms: float
    status: int
    error: str | None = None
    # The server's event-loop thread's schedstat just before and just after the probe (None:
    # not recorded, as in runs before it was, or unreadable).
    loop_sched: tuple[Schedstat, Schedstat] | None = None
    # The prober's own thread's schedstat around the same probe (None: not recorded).
    prober_sched: tuple[Schedstat, Schedstat] | None = None
    # The loop thread's stat around the same probe (None: not recorded).
    loop_stat: tuple[ThreadStat, ThreadStat] | None = None
    # Each CPU's steal time (ms, in clock ticks) around the same probe (None: not recorded).
    steal: tuple[tuple[int, ...], tuple[int, ...]] | None = None

    @property
    def missed(self) -> bool:
        return self.status != 200 or self.ms > OVER_MS


@dataclass(frozen=True)
class ArmStats:
    """One request on one arm: exactly the keys of results.json's per-arm object."""

    worst_ms: float
    p50_ms: float
    p99_ms: float
    probes: int
    over_3s: int
    prompt_tokens: int


@dataclass(frozen=True)
class FloodStats:
    probes: int
    over_3s: int
    missed: int
    longest_miss_run: int
    unhealthy_runs: int  # maximal runs of >= UNHEALTHY_RUN consecutive misses
    first_unhealthy_s: float | None  # seconds after the flood began
    worst_ms: float
    p50_ms: float
    p99_ms: float
    requests_sent: int
    requests_ok: int


def _sample_pair(raw, fields: int | None) -> tuple | None:
    return None if raw is None else tuple(tuple(int(v) for v in sample[:fields]) for sample in raw[:2])


def load_probes(path: Path) -> list[Probe]:
    probes = []
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise ResultsError(f"{path}: missing; did the prober start? (see the arm's session.json)") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
            sched, prober_sched = (_sample_pair(raw.get(key), 3) for key in ("loop_sched", "prober_sched"))
            probes.append(Probe(float(raw["start"]), float(raw["end"]), float(raw["ms"]), int(raw["status"]),
                                raw.get("error"), sched, prober_sched, _sample_pair(raw.get("loop_stat"), 4),
                                _sample_pair(raw.get("steal"), None)))
        except (ValueError, KeyError, TypeError) as err:
            # The prober may be killed mid-line; only the last line may be partial.
            if number == len(lines):
                continue
            raise ResultsError(f"{path}:{number}: not a probe record ({err}): {line[:200]}") from None
    return sorted(probes, key=lambda p: p.start)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in (0, 100]) of a non-empty list."""
    if not values:
        raise ResultsError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


def overlapping(probes: list[Probe], start: float, end: float) -> list[Probe]:
    return [p for p in probes if p.end >= start and p.start <= end]


# A request shorter than the probe period may fall between two probes: the probes of the
# next 50 ms then stand for it (the first probe after it saw the loop it left behind).
SHORT_REQUEST_SLACK_S = 0.05


def request_window(probes: list[Probe], sent: float, done: float) -> list[Probe]:
    """The probes that stand for a request: those overlapping it, else those of the next 50 ms."""
    window = overlapping(probes, sent, done) or overlapping(probes, sent, done + SHORT_REQUEST_SLACK_S)
    if not window:
        raise ResultsError(f"no probe overlaps the request window [{sent:.3f}, {done:.3f}]")
    return window


def request_stats(probes: list[Probe], sent: float, done: float, prompt_tokens: int) -> ArmStats:
    window = request_window(probes, sent, done)
    ms = [p.ms for p in window]
    return ArmStats(
        worst_ms=round(max(ms), 1),
        p50_ms=round(percentile(ms, 50), 1),
        p99_ms=round(percentile(ms, 99), 1),
        probes=len(window),
        over_3s=sum(1 for p in window if p.missed),
        prompt_tokens=int(prompt_tokens),
    )


@dataclass(frozen=True)
class ProbeSplit:
    """One probe's latency split by the loop thread's and the prober's schedstat.

    runqueue_ms: the loop thread was runnable but another task had the CPU; prober_runqueue_ms:
    the same for the prober's thread (sending the request or reading the answer); host_steal_ms:
    the most steal time any one CPU had during the probe (the hypervisor ran something else while
    the virtual CPU was ready; a thread on it still counts as running). All three are host CPU
    starvation, not the engine's doing. remainder_ms = ms - all three: the design's own delay
    (the loop running other work, or waiting for the GIL or I/O); loop_cpu_ms: how long the
    loop thread ran (stolen time included). The phases of a probe run one after the other (prober sends, loop
    answers, prober reads), so the two waits add. The kernel adds a wait to the runqueue field
    when the wait ends, so a wait that began before the probe counts whole: the waits are
    capped at the probe's latency. None when the probe has no schedstat samples (the prober's
    wait: 0 for runs that did not record it).

    loop_faults: page faults the loop thread took during the probe (minor and major);
    loop_kernel_ms: the part of its CPU time the kernel accounted to kernel mode (faulting pages
    in, reclaiming memory), sampled per clock tick (10 ms at CLK_TCK 100), so a count of ticks,
    not a measurement of short spans, like host_steal_ms. None where not recorded.
    """

    ms: float
    runqueue_ms: float | None
    loop_cpu_ms: float | None
    remainder_ms: float | None
    prober_runqueue_ms: float | None = None
    loop_faults: int | None = None
    loop_kernel_ms: float | None = None
    host_steal_ms: float | None = None


def _deltas(probe: Probe, pair: tuple[Schedstat, Schedstat], what: str) -> tuple[float, float]:
    """(CPU ms, runqueue-wait ms) between the two samples of `pair`."""
    (cpu0, wait0, _), (cpu1, wait1, _) = pair
    if cpu1 < cpu0 or wait1 < wait0:
        raise ResultsError(f"probe at {probe.start:.3f}: {what} schedstat went backwards {pair}"
                           " (not the same thread?)")
    return (cpu1 - cpu0) / 1e6, (wait1 - wait0) / 1e6


def _stat_deltas(probe: Probe) -> tuple[int | None, float | None]:
    """(page faults, kernel ms) of the loop thread between the two samples of its stat."""
    if probe.loop_stat is None:
        return None, None
    before, after = probe.loop_stat
    if any(b > a for b, a in zip(before, after)):
        raise ResultsError(f"probe at {probe.start:.3f}: loop stat went backwards {probe.loop_stat}"
                           " (not the same thread?)")
    return (after[0] - before[0]) + (after[1] - before[1]), float(after[3] - before[3])


def _steal_ms(probe: Probe) -> float | None:
    """The largest steal-time growth of one CPU between the probe's two /proc/stat reads."""
    if probe.steal is None:
        return None
    before, after = probe.steal
    if len(before) != len(after) or any(b > a for b, a in zip(before, after)):
        raise ResultsError(f"probe at {probe.start:.3f}: steal went backwards or changed CPUs {probe.steal}")
    return float(max((a - b for b, a in zip(before, after)), default=0))


def split_probe(probe: Probe) -> ProbeSplit:
    faults, kernel_ms = _stat_deltas(probe)
    steal = _steal_ms(probe)
    if probe.loop_sched is None:
        return ProbeSplit(round(probe.ms, 1), None, None, None, None, faults, kernel_ms, steal)
    loop_cpu, loop_wait = _deltas(probe, probe.loop_sched, "loop")
    runqueue = min(loop_wait, probe.ms)
    prober_wait = 0.0
    if probe.prober_sched is not None:
        prober_wait = min(_deltas(probe, probe.prober_sched, "prober")[1], probe.ms - runqueue)
    # Capped like the waits: a steal tick counted at the probe's edge may lie partly outside it.
    stolen = min(steal or 0.0, probe.ms - runqueue - prober_wait)
    return ProbeSplit(round(probe.ms, 1), round(runqueue, 1), round(loop_cpu, 1),
                      round(probe.ms - runqueue - prober_wait - stolen, 1),
                      round(prober_wait, 1) if probe.prober_sched is not None else None,
                      faults, kernel_ms, None if steal is None else round(stolen, 1))


WORST_SPLIT = 3  # worst probes split per window


def worst_probes(window: list[Probe], count: int = WORST_SPLIT) -> dict:
    """results.json's worst_probes entry of one window: its probe counts, its slowest probes split,
    and the probe with the largest remainder (the design's own delay) among all that were split,
    which need not be one of the slowest (null when none was)."""
    slowest = sorted(window, key=lambda p: p.ms, reverse=True)[:count]
    splits = [split_probe(p) for p in window if p.loop_sched is not None]
    design = max(splits, key=lambda split: split.remainder_ms, default=None)
    return {"probes": len(window), "sampled": len(splits),
            "worst": [asdict(split_probe(p)) for p in slowest],
            "worst_remainder": None if design is None else asdict(design)}


def arm_worst_probes(arm_dir: Path) -> dict[str, dict]:
    """{request name, or "mixed": worst_probes(...)} for one arm's directory."""
    session = load_session(arm_dir)
    files: dict[str, list[Probe]] = {}

    def probes(name: str) -> list[Probe]:
        if name not in files:
            files[name] = load_probes(arm_dir / name)
        return files[name]

    out = {req["name"]: worst_probes(request_window(probes(req.get("probe_file", "probes.jsonl")), req["sent"],
                                                    req["done"]))
           for req in session.get("requests", [])}
    mixed = session.get("mixed")
    if mixed:
        window = overlapping(probes(mixed["probe_file"]), mixed["start"], mixed["end"])
        if window:
            out["mixed"] = worst_probes(window)
    return out


def miss_runs(probes: list[Probe]) -> list[int]:
    """Lengths of the maximal runs of consecutive missed probes, in order."""
    runs, current = [], 0
    for probe in probes:
        if probe.missed:
            current += 1
        elif current:
            runs.append(current)
            current = 0
    if current:
        runs.append(current)
    return runs


def flood_stats(probes: list[Probe], start: float, end: float, requests: list[dict]) -> FloodStats:
    window = overlapping(probes, start, end)
    if not window:
        raise ResultsError(f"no probe overlaps the flood [{start:.3f}, {end:.3f}]")
    runs = miss_runs(window)
    first_unhealthy = None
    current = 0
    for probe in window:
        current = current + 1 if probe.missed else 0
        if current == UNHEALTHY_RUN:
            first_unhealthy = round(probe.end - start, 1)
            break
    ms = [p.ms for p in window]
    return FloodStats(
        probes=len(window),
        over_3s=sum(1 for p in window if p.ms > OVER_MS or p.status != 200),
        missed=sum(1 for p in window if p.missed),
        longest_miss_run=max(runs, default=0),
        unhealthy_runs=sum(1 for r in runs if r >= UNHEALTHY_RUN),
        first_unhealthy_s=first_unhealthy,
        worst_ms=round(max(ms), 1),
        p50_ms=round(percentile(ms, 50), 1),
        p99_ms=round(percentile(ms, 99), 1),
        requests_sent=len(requests),
        requests_ok=sum(1 for r in requests if r.get("status") == 200 and not r.get("error")),
    )


def arm_request_stats(arm_dir: Path) -> dict[str, ArmStats]:
    """{request name: stats} for one arm's directory (session.json + its probe files)."""
    session = load_session(arm_dir)
    files: dict[str, list[Probe]] = {}
    out = {}
    for req in session.get("requests", []):
        if req.get("error") or req.get("prompt_tokens") is None:
            raise ResultsError(f"{arm_dir / 'session.json'}: request {req.get('name')} failed: {req.get('error')}")
        name = req.get("probe_file", "probes.jsonl")
        if name not in files:
            files[name] = load_probes(arm_dir / name)
        out[req["name"]] = request_stats(files[name], req["sent"], req["done"], req["prompt_tokens"])
    return out


def arm_probes(arm_dir: Path) -> list[Probe]:
    """Every probe of the arm's request phases (all probe files its requests name), by time."""
    session = load_session(arm_dir)
    names = dict.fromkeys(req.get("probe_file", "probes.jsonl") for req in session.get("requests", []))
    return sorted((p for name in names for p in load_probes(arm_dir / name)), key=lambda p: p.start)


def load_session(arm_dir: Path) -> dict:
    path = arm_dir / "session.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ResultsError(f"{path}: missing; the arm's container did not finish (see container.log there)") from None


def combine(per_arm: dict[str, dict[str, ArmStats]], arms: tuple[str, ...] = ("stock", "v3")) -> dict:
    """results.json: {"requests": [{"name", <arm>: {...}, ...}]} in the first arm's request order."""
    missing = [arm for arm in arms if arm not in per_arm]
    if missing:
        raise ResultsError(f"no results for arm(s) {missing}")
    names = list(per_arm[arms[0]])
    for arm in arms[1:]:
        if list(per_arm[arm]) != names:
            raise ResultsError(f"arm {arm} ran {list(per_arm[arm])}, arm {arms[0]} ran {names}")
    return {"requests": [{"name": name, **{arm: asdict(per_arm[arm][name]) for arm in arms}} for name in names]}


TOKENIZER_MANIFEST = "lab_tokenizer.json"  # model_dir.MANIFEST
TOKENIZER_KEYS = {"name": str, "vocab_size": int, "backend_json_bytes": int}
OFFLOAD_PHASE_KEYS = {"server", "requests", "large_prompts", "large_bodies", "image_requests", "counters", "delta",
                      "queue_depth_after"}
OPTIONAL_TOP = ("tokenizer", "offload", "worst_probes")


def load_tokenizers(models: Path) -> dict | None:
    """{"text": manifest, "vision": manifest} of the run's model directories (None: not recorded)."""
    out = {}
    for model in ("text", "vision"):
        path = models / model / TOKENIZER_MANIFEST
        try:
            out[model] = json.loads(path.read_text())
        except FileNotFoundError:
            continue
        except ValueError as err:
            raise ResultsError(f"{path}: not JSON ({err})") from None
    return out or None


def _validate_tokenizer(tokenizer: dict) -> None:
    if not isinstance(tokenizer, dict) or not tokenizer or not set(tokenizer) <= {"text", "vision"}:
        raise ResultsError(f"results.json: tokenizer must map 'text' / 'vision' to a manifest, got {tokenizer!r:.200}")
    for model, manifest in tokenizer.items():
        for key, kind in TOKENIZER_KEYS.items():
            value = manifest.get(key) if isinstance(manifest, dict) else None
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ResultsError(f"results.json: tokenizer.{model}.{key} = {value!r} is not {kind.__name__}")


def _validate_offload(offload: dict, arms: tuple[str, ...]) -> None:
    if not isinstance(offload, dict) or not set(offload) <= set(arms):
        raise ResultsError(f"results.json: offload must map arms {list(arms)} to records, got {sorted(offload or {})}")
    for arm, record in offload.items():
        if not isinstance(record, dict) or set(record) != {"metrics_enabled", "reason", "phases"}:
            raise ResultsError(f"results.json: offload.{arm} keys {sorted(record or {})},"
                               " expected metrics_enabled, phases, reason")
        for name, phase in record["phases"].items():
            if set(phase) != OFFLOAD_PHASE_KEYS:
                raise ResultsError(f"results.json: offload.{arm}.phases.{name} keys {sorted(phase)},"
                                   f" expected {sorted(OFFLOAD_PHASE_KEYS)}")
            for key in ("requests", "large_prompts", "large_bodies", "image_requests"):
                if not isinstance(phase[key], int) or isinstance(phase[key], bool):
                    raise ResultsError(f"results.json: offload.{arm}.phases.{name}.{key} = {phase[key]!r} is not int")
            if phase["delta"] is not None and not isinstance(phase["delta"], dict):
                raise ResultsError(f"results.json: offload.{arm}.phases.{name}.delta is neither null nor an object")


def _validate_worst_probes(worst: dict, arms: tuple[str, ...]) -> None:
    if not isinstance(worst, dict) or not set(worst) <= set(arms):
        raise ResultsError(f"results.json: worst_probes must map arms {list(arms)} to windows, got {sorted(worst or {})}")
    split_keys = set(ProbeSplit.__annotations__)
    for arm, windows in worst.items():
        for name, entry in windows.items():
            where = f"results.json: worst_probes.{arm}.{name}"
            if not isinstance(entry, dict) or set(entry) != {"probes", "sampled", "worst", "worst_remainder"}:
                raise ResultsError(f"{where} keys {sorted(entry or {})}, expected probes, sampled, worst,"
                                   " worst_remainder")
            splits = [(f"{where}.worst", item) for item in entry["worst"]]
            if entry["worst_remainder"] is not None:
                splits.append((f"{where}.worst_remainder", entry["worst_remainder"]))
            for at, item in splits:
                if set(item) != split_keys:
                    raise ResultsError(f"{at} keys {sorted(item)}, expected {sorted(split_keys)}")
                if not isinstance(item["ms"], float):
                    raise ResultsError(f"{at}.ms = {item['ms']!r} is not float")
                for key in split_keys - {"ms", "loop_faults"}:
                    if item[key] is not None and not isinstance(item[key], float):
                        raise ResultsError(f"{at}.{key} = {item[key]!r} is neither null nor float")
                faults = item["loop_faults"]
                if faults is not None and (not isinstance(faults, int) or isinstance(faults, bool)):
                    raise ResultsError(f"{at}.loop_faults = {faults!r} is neither null nor int")


def validate(results: dict, arms: tuple[str, ...] = ("stock", "v3")) -> None:
    """Raises ResultsError unless `results` has exactly the agreed shape: {"requests": [...]},
    plus optionally "tokenizer" (the model directories' tokenizer), "offload" and
    "worst_probes" (per arm)."""
    keys = {field: kind for field, kind in ArmStats.__annotations__.items()}
    if "requests" not in results or not set(results) <= {"requests", *OPTIONAL_TOP} \
            or not isinstance(results["requests"], list):
        raise ResultsError(f"results.json: top level must be exactly {{'requests': [...]}} plus optional"
                           f" {list(OPTIONAL_TOP)}, got keys {sorted(results)}")
    if "tokenizer" in results:
        _validate_tokenizer(results["tokenizer"])
    if "offload" in results:
        _validate_offload(results["offload"], arms)
    if "worst_probes" in results:
        _validate_worst_probes(results["worst_probes"], arms)
    for index, entry in enumerate(results["requests"]):
        if set(entry) != {"name", *arms} or not isinstance(entry["name"], str):
            raise ResultsError(f"results.json: requests[{index}] keys {sorted(entry)}, expected name + {list(arms)}")
        for arm in arms:
            stats = entry[arm]
            if set(stats) != set(keys):
                raise ResultsError(f"results.json: requests[{index}].{arm} keys {sorted(stats)}, expected {sorted(keys)}")
            for field, kind in keys.items():
                value = stats[field]
                ok = isinstance(value, int) and not isinstance(value, bool) if kind == "int" else isinstance(value, float)
                if not ok:
                    raise ResultsError(f"results.json: requests[{index}].{arm}.{field} = {value!r} is not {kind}")
