"""The lab's human-readable outputs: markdown tables and PNG charts of probe latency.

The table follows the reference evidence's shape (one request at a time, the worst /health
probe per request, stock against patched). request_chart draws one panel per request with both
arms' probes against the time since that request was sent; timeline_chart draws one panel per
arm over a whole phase (the flood). matplotlib runs headless (Agg).
"""

from __future__ import annotations

from pathlib import Path

from lab.attribution import GC_THREAD
from lab.results import OVER_MS, FloodStats, Probe


def _ms(value: float) -> str:
    return f"{value:,.0f} ms" if value >= 10 else f"{value:.1f} ms"


def markdown_table(results: dict, arms: tuple[str, ...] = ("stock", "v3")) -> str:
    """One row per request; per arm its worst probe, p50 / p99, probe count and misses."""
    def per_arm(title: str) -> str:
        return " | ".join(f"{title}, {arm}" for arm in arms)

    lines = [
        f"| Request | Prompt tokens | {per_arm('Worst /health')} | {per_arm('p50 / p99')} | Probes {' / '.join(arms)}"
        f" | Probes over 3 s, {' / '.join(arms)} |",
        "|---|---:|" + "---:|" * (2 * len(arms) + 2),
    ]
    for entry in results["requests"]:
        stats = [entry[arm] for arm in arms]
        counts = [s["prompt_tokens"] for s in stats]
        tokens = f"{counts[0]:,}" if len(set(counts)) == 1 else " / ".join(f"{c:,}" for c in counts) + " (differ)"
        lines.append(
            f"| {entry['name']} | {tokens} | " + " | ".join(f"**{_ms(s['worst_ms'])}**" for s in stats)
            + " | " + " | ".join(f"{_ms(s['p50_ms'])} / {_ms(s['p99_ms'])}" for s in stats)
            + f" | {' / '.join(str(s['probes']) for s in stats)} | {' / '.join(str(s['over_3s']) for s in stats)} |"
        )
    return "\n".join(lines) + "\n"


def _opt_ms(value: float | None) -> str:
    return "never arrived" if value is None else _ms(value)


def dispatch_table(dispatch: dict[str, dict[str, float | None]], arms: tuple[str, ...]) -> str:
    """Time from the client's send to the scheduler's receipt, per request and arm."""
    names = list(dispatch[arms[0]])
    lines = [
        "Dispatch delay (client send to fake-scheduler receipt):",
        "",
        "| Request | " + " | ".join(arms) + " |",
        "|---|" + "---:|" * len(arms),
    ]
    for name in names:
        lines.append(f"| {name} | " + " | ".join(_opt_ms(dispatch[arm].get(name)) for arm in arms) + " |")
    return "\n".join(lines) + "\n"


def mixed_table(mixed: dict, baseline: str, minutes: float) -> str:
    """The mixed phase per arm: probes, errors by class, tool prompts against the baseline, small chats."""
    lines = [
        f"Mixed traffic for {minutes:g} min (tool chats, small chats, image chats, 64 x 9 MP and 16 x 48 MP"
        f" requests at once). Tool prompts, and the image requests' ids and features as the scheduler read"
        f" them, compared with arm {baseline}.",
        "",
        "| Arm | Requests OK | Errors by class | 'Already borrowed' in server log | Worst / p50 / p99 /health"
        " | Probes over 20 ms | Tool prompts equal / changed / unknown | Image requests equal / changed / unknown"
        " | Small-chat dispatch p50 / p99 / worst |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for arm, m in mixed.items():
        errors = ", ".join(f"{k}: {v}" for k, v in m.errors.items()) or "none"
        p, i = m.tool_prompts, m.image_requests
        d = m.small_chat_dispatch
        small = f"{_ms(d.p50_ms)} / {_ms(d.p99_ms)} / {_ms(d.worst_ms)}" if d else "none arrived"
        lines.append(
            f"| {arm} | {m.answered_ok} / {m.requests} | {errors} | {m.server_log_already_borrowed}"
            f" | {_ms(m.worst_ms)} / {_ms(m.p50_ms)} / {_ms(m.p99_ms)} | {m.probes_over_20ms} / {m.probes}"
            f" | {p.equal} / {p.changed} / {p.unknown} | {i.equal} / {i.changed} / {i.unknown} | {small} |"
        )
    return "\n".join(lines) + "\n"


def targets_table(results: dict, dispatch: dict, mixed: dict, arms: tuple[str, ...], baseline: str) -> str:
    """Issues 12's and 37's targets per arm: value and met / MISSED (not measured when a phase was off)."""
    from lab import checks

    lines = ["Targets (issue 12; the design's own delay: issue 37):", "", "| Measure | Target | " + " | ".join(arms) + " |",
             "|---|---|" + "---|" * len(arms)]
    per_arm = {arm: checks.target_rows(results, dispatch, mixed, arm, baseline) for arm in arms}
    for index, (label, target, _, _) in enumerate(per_arm[arms[0]]):
        cells = []
        for arm in arms:
            _, _, value, met = per_arm[arm][index]
            cells.append(value if met is None else f"{value} ({'met' if met else 'MISSED'})")
        lines.append(f"| {label} | {target} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def worst_probes_table(worst: dict[str, dict[str, dict]], arms: tuple[str, ...]) -> str:
    """The slowest probes per window and arm, split into the loop thread's and the prober's runqueue
    waits (host CPU starvation) and the remainder (the design's own delay), from their schedstat."""
    def cell(value: float | None) -> str:
        return "-" if value is None else _ms(value)

    def count(value: int | None) -> str:
        return "-" if value is None else f"{value:,}"

    lines = [
        "Slowest probes split by schedstat: the server's event-loop thread's runqueue wait and the"
        " prober's own (runnable but not running: the host's CPU was busy elsewhere), the host's steal"
        " (the most any one CPU had: the hypervisor ran something else; clock-tick sampled, 10 ms steps)"
        " and the remainder (/health minus the three: the design's own delay); loop on CPU: how long the"
        " loop thread ran meanwhile (stolen time included), of which in the kernel (clock-tick sampled),"
        " and the page faults it took.",
        "",
        "| Window | Arm | Rank | /health | Loop runqueue wait | Prober runqueue wait | Host steal | Remainder"
        " | Loop on CPU | Loop in kernel | Loop page faults | Probes sampled |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    names = list(dict.fromkeys(name for arm in arms for name in worst.get(arm, {})))
    for name in names:
        for arm in arms:
            entry = worst.get(arm, {}).get(name)
            if entry is None:
                continue
            sampled = f"{entry['sampled']} / {entry['probes']}"
            for rank, split in enumerate(entry["worst"], 1):
                lines.append(f"| {name} | {arm} | {rank} | {_ms(split['ms'])} | {cell(split['runqueue_ms'])}"
                             f" | {cell(split.get('prober_runqueue_ms'))} | {cell(split.get('host_steal_ms'))}"
                             f" | {cell(split['remainder_ms'])}"
                             f" | {cell(split['loop_cpu_ms'])} | {cell(split.get('loop_kernel_ms'))}"
                             f" | {count(split.get('loop_faults'))} | {sampled} |")
    return "\n".join(lines) + "\n"


def attribution_section(attributed: dict[str, dict[str, dict]], top: int = 3) -> str:
    """Per arm and probe file: how many probes were over 20 ms and the code that ran during them."""
    lines = ["Attribution of probes over 20 ms (py-spy samples of the server process during each slow probe;"
             f" the server's own record of its GC pauses as the thread `{GC_THREAD}`):", ""]
    for arm, files in attributed.items():
        for probe_file, s in files.items():
            head = f"* **{arm}**, `{probe_file}`: {s['slow_probes']} probes over {s['slow_ms']:g} ms"
            gc_pauses = s.get("gc")
            if gc_pauses is not None:  # over the server's whole life, not this file's probes only
                head += (f" (the server's cyclic GC: {gc_pauses['pauses']} pauses of 1 ms or more,"
                         f" {gc_pauses['generation_2']} of generation 2, longest {_ms(gc_pauses['max_ms'])})")
            if not s["slow_probes"]:
                lines.append(head + ".")
                continue
            if not s.get("profiled", True):
                lines.append(head + "; not profiled.")
                continue
            if s.get("native"):
                head += " (native profile: every thread is sampled, waiting ones too)"
            lag = s.get("sampler_behind_max_s") or 0.0
            lines.append(head + f" ({_ms(s['slow_probe_ms'])} in all; the loop thread ran Python code for"
                         f" {_ms(s['loop_ran_ms'])} of it" + (f"; py-spy fell up to {lag:.1f} s behind" if lag else "") + ").")
            for c in s["loop_culprits"][:top]:
                lines.append(f"  * loop: {_ms(c['ms'])} over {c['probes']} probes in `{c['frame']}`"
                             + (f" (from `{c['sglang_frame']}`)" if c["sglang_frame"] and c["sglang_frame"] != c["frame"] else ""))
            for c in s["other_thread_culprits"][:top]:
                lines.append(f"  * {c['thread']}: {_ms(c['ms'])} over {c['probes']} probes in `{c['frame']}`"
                             + (f" (from `{c['sglang_frame']}`)" if c["sglang_frame"] and c["sglang_frame"] != c["frame"] else ""))
            for probe in s["slowest"]:
                if "in_server" in probe:
                    lines.append(f"  * the {_ms(probe['ms'])} probe, CPU per thread from the server's own sampler: "
                                 + ("; ".join(f"{t['thread']} {_ms(t['cpu_ms'])} ("
                                              + ", ".join(f"`{frame}` {_ms(ms)}" for frame, ms in t["frames"]) + ")"
                                              for t in probe["in_server"]) or "no thread ran"))
    return "\n".join(lines) + "\n"


def _bytes(n: int) -> str:
    return f"{n:,} bytes ({n / 2**20:.1f} MiB)"


def tokenizer_section(tokenizer: dict | None) -> str:
    """Which tokenizer the model directories had: name, vocabulary, backend JSON size."""
    if not tokenizer:
        return "Tokenizer: not recorded (model directories without lab_tokenizer.json).\n"
    text = tokenizer.get("text") or next(iter(tokenizer.values()))
    lines = [
        f"Tokenizer: **{text['name']}**, vocabulary {text['vocab_size']:,}, backend JSON"
        f" {_bytes(text['backend_json_bytes'])} (`{text.get('source', '?')}`, seed {text.get('seed', '?')}).",
        "",
        "| Model | Tokenizer | Vocabulary | Backend JSON (`to_str()`) | tokenizer.json | Chat template | Extra tokens |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for model, m in tokenizer.items():
        extra = ", ".join(f"`{t}`" for t in m.get("extra_tokens") or []) or "none"
        size = m.get("tokenizer_json_bytes")
        lines.append(f"| {model} | {m['name']} | {m['vocab_size']:,} | {_bytes(m['backend_json_bytes'])}"
                     f" | {_bytes(size) if isinstance(size, int) else '?'} | {m.get('chat_template', '?')} | {extra} |")
    return "\n".join(lines) + "\n"


def priority_section(sessions: dict) -> str:
    """At which nice value the lab's client work ran, and each arm's servers as read from /proc."""
    parts = []
    for arm, session in sessions.items():
        servers = session.get("server_nice")
        read = ", ".join(str(n) for n in servers) if servers else "not recorded"
        parts.append(f"{arm}: client {session.get('client_nice', 'not recorded')}, servers {read}")
    return ("Priority (nice; the prober runs at the servers' 0; the client's nice also covers py-spy and"
            " the lab's podman calls): " + "; ".join(parts) + ".\n")


def offload_table(offload: dict, arms: tuple[str, ...]) -> str:
    """The offload counters' deltas per arm and phase (sglang:offload_events_total on /metrics)."""
    from lab.offload import EVENTS, PATHS, path_events

    short = {"tokenizer_process": "tokenizer process", "json_process": "JSON process",
             "preprocessing_lane_bulk": "lane bulk", "preprocessing_lane_small": "lane small",
             "mm_process": "multimodal process"}
    lines = [
        "Offload counters: deltas of `sglang:offload_events_total` over each phase, read from the server's"
        f" /metrics; each cell is {' / '.join(e.replace('_', ' ') for e in EVENTS)}. Large prompts: over the"
        " tokenizer process threshold (256 Ki characters); large bodies: over 1 MiB.",
        "",
        "| Arm | Phase | Requests (large prompts / large bodies / with images) | " + " | ".join(short[p] for p in PATHS)
        + " | Queue depth after |",
        "|---|---|---:|" + "---:|" * len(PATHS) + "---|",
    ]
    for arm in arms:
        record = offload.get(arm)
        if record is None:
            lines.append(f"| {arm} | - | - | not recorded |" + " - |" * (len(PATHS) - 1) + " - |")
            continue
        if not record["phases"]:
            reason = "metrics on" if record["metrics_enabled"] else f"metrics off: {record['reason']}"
            lines.append(f"| {arm} | - | - | no phase scraped ({reason}) |" + " - |" * (len(PATHS) - 1) + " - |")
            continue
        for name, phase in record["phases"].items():
            counts = f"{phase['requests']} ({phase['large_prompts']} / {phase['large_bodies']} / {phase['image_requests']})"
            delta = phase["delta"]
            if delta is None:
                lines.append(f"| {arm} | {name} | {counts} | absent: {phase['counters']} |"
                             + " - |" * (len(PATHS) - 1) + " - |")
                continue
            cells = [" / ".join(f"{v:g}" for v in path_events(delta, p)) for p in PATHS]
            depth = ", ".join(f"{k}: {v:g}" for k, v in (phase["queue_depth_after"] or {}).items()) or "-"
            lines.append(f"| {arm} | {name} | {counts} | " + " | ".join(cells) + f" | {depth} |")
    return "\n".join(lines) + "\n"


def flood_table(flood: dict[str, FloodStats], rps: float, minutes: float, body_bytes: int) -> str:
    lines = [
        f"Flood: a new {body_bytes / 1e6:.1f} MB conversation every {1 / rps:.0f} s for {minutes:g} min"
        f" (probes time out after 3 s).",
        "",
        "| Arm | Probes | Over 3 s / failed | Longest run of misses | Runs of >= 3 misses (unhealthy)"
        " | First unhealthy after | Worst / p50 / p99 | Requests answered |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for arm, s in flood.items():
        first = f"{s.first_unhealthy_s:.1f} s" if s.first_unhealthy_s is not None else "never"
        lines.append(
            f"| {arm} | {s.probes} | {s.over_3s} | {s.longest_miss_run} | {s.unhealthy_runs} | {first}"
            f" | {_ms(s.worst_ms)} / {_ms(s.p50_ms)} / {_ms(s.p99_ms)} | {s.requests_ok} / {s.requests_sent} |"
        )
    return "\n".join(lines) + "\n"


ARM_COLORS = {"stock": "C3", "v3": "C0", "upstream": "C2", "v4": "C1"}
MARGIN_S = 1.5  # quiet time shown before and after each request


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def request_chart(
    path: Path,
    probes: dict[str, list[Probe]],
    windows: dict[str, list[tuple[str, float, float]]],
    title: str,
) -> None:
    """One panel per request: each arm's probes (log scale) against seconds since it was sent.

    A probe is drawn at its start, with a bar over the time it waited; the dotted line of the
    arm's colour marks when the arm's answer arrived.
    """
    plt = _pyplot()
    arms = list(probes)
    names = [name for name, _, _ in windows[arms[0]]]
    fig, axes = plt.subplots(len(names), 1, figsize=(11, 2.6 * len(names)), squeeze=False)
    top = max((p.ms for arm in arms for p in probes[arm]), default=1000.0)
    for axis, name in zip(axes[:, 0], names):
        for arm in arms:
            color = ARM_COLORS.get(arm, "C4")
            (_, sent, done), = [w for w in windows[arm] if w[0] == name]
            near = [p for p in probes[arm] if p.end >= sent - MARGIN_S and p.start <= done + MARGIN_S]
            # The same probes as the table's worst: those overlapping [sent, done].
            worst = max((p.ms for p in near if p.end >= sent and p.start <= done), default=0.0)
            axis.plot([p.start - sent for p in near], [max(p.ms, 0.1) for p in near], ".", ms=4, color=color,
                      label=f"{arm} (worst {_ms(worst)})")
            slow = [p for p in near if p.ms >= 50]
            if slow:
                axis.hlines([p.ms for p in slow], [p.start - sent for p in slow], [p.end - sent for p in slow],
                            color=color, lw=1.5)
            failed = [p for p in near if p.status != 200]
            if failed:
                axis.plot([p.start - sent for p in failed], [max(p.ms, 0.1) for p in failed], "x", color=color)
            axis.axvline(done - sent, color=color, lw=0.8, ls=":")
        axis.axvline(0.0, color="0.4", lw=0.8)
        axis.axhline(OVER_MS, color="0.3", lw=0.8, ls="--")
        axis.set_yscale("log")
        axis.set_ylim(0.5, top * 3)
        axis.set_ylabel("/health (ms)")
        axis.set_title(name, loc="left", fontsize=10)
        axis.grid(True, which="major", alpha=0.3)
        axis.legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("seconds since the request was sent (dotted: answer received; dashed: 3 s)")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def timeline_chart(
    path: Path,
    probes: dict[str, list[Probe]],
    windows: dict[str, list[tuple[str, float, float]]],
    title: str,
) -> None:
    """One panel per arm: probe latency (log scale) against seconds since the arm's first probe."""
    plt = _pyplot()

    arms = list(probes)
    fig, axes = plt.subplots(len(arms), 1, figsize=(13, 3.2 * len(arms)), sharey=True, squeeze=False)
    top = max((p.ms for arm in arms for p in probes[arm]), default=1000.0)
    for axis, arm in zip(axes[:, 0], arms):
        samples = probes[arm]
        origin = samples[0].start if samples else 0.0
        for index, (name, start, end) in enumerate(windows.get(arm, [])):
            axis.axvspan(start - origin, end - origin, color=f"C{index % 8 + 1}", alpha=0.15, lw=0)
            axis.text(start - origin, top * 1.4, name, fontsize=8, va="bottom")
        ok = [p for p in samples if p.status == 200]
        bad = [p for p in samples if p.status != 200]
        # Each probe at its start time; a stuck probe also gets a bar over the time it waited.
        axis.plot([p.start - origin for p in ok], [max(p.ms, 0.1) for p in ok], ".", ms=3, color="C0",
                  label="/health latency (probe start)")
        slow = [p for p in ok if p.ms >= 100]
        if slow:
            axis.hlines([p.ms for p in slow], [p.start - origin for p in slow], [p.end - origin for p in slow],
                        color="C0", lw=1.2)
        if bad:
            axis.plot([p.start - origin for p in bad], [max(p.ms, 0.1) for p in bad], "x", color="C3",
                      label="failed / timed out")
        axis.axhline(OVER_MS, color="C3", lw=0.8, ls="--", label="3 s")
        axis.set_yscale("log")
        axis.set_ylim(0.5, top * 4)
        axis.set_ylabel("probe latency (ms)")
        axis.set_title(arm, loc="left", fontsize=10)
        axis.grid(True, which="major", alpha=0.3)
        axis.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8)
    axes[-1, 0].set_xlabel("seconds since the arm's first probe")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
