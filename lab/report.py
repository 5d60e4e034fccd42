"""The lab's human-readable outputs: a markdown table and a PNG chart of probe latency.

The table follows the reference evidence's shape (one request at a time, the worst /health
probe per request, stock against patched); the chart plots every probe of both arms over time
with the request windows shaded. matplotlib runs headless (Agg).
"""

from __future__ import annotations

from pathlib import Path

from lab.results import OVER_MS, FloodStats, Probe


def _ms(value: float) -> str:
    return f"{value:,.0f} ms" if value >= 10 else f"{value:.1f} ms"


def markdown_table(results: dict, arms: tuple[str, str] = ("stock", "v3")) -> str:
    a, b = arms
    lines = [
        f"| Request | Prompt tokens | Worst /health, {a} | Worst /health, {b} | p50 / p99, {a} | p50 / p99, {b}"
        f" | Probes {a} / {b} | Probes over 3 s, {a} / {b} |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for entry in results["requests"]:
        sa, sb = entry[a], entry[b]
        tokens = f"{sa['prompt_tokens']:,}" if sa["prompt_tokens"] == sb["prompt_tokens"] else (
            f"{sa['prompt_tokens']:,} / {sb['prompt_tokens']:,}")
        lines.append(
            f"| {entry['name']} | {tokens} | **{_ms(sa['worst_ms'])}** | **{_ms(sb['worst_ms'])}**"
            f" | {_ms(sa['p50_ms'])} / {_ms(sa['p99_ms'])} | {_ms(sb['p50_ms'])} / {_ms(sb['p99_ms'])}"
            f" | {sa['probes']} / {sb['probes']} | {sa['over_3s']} / {sb['over_3s']} |"
        )
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


def chart(
    path: Path,
    probes: dict[str, list[Probe]],
    windows: dict[str, list[tuple[str, float, float]]],
    title: str,
) -> None:
    """One panel per arm: probe latency (log scale) against seconds since the arm's first probe."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = list(probes)
    fig, axes = plt.subplots(len(arms), 1, figsize=(11, 3.2 * len(arms)), sharey=True, squeeze=False)
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
        axis.legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("seconds since the arm's first probe")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
