"""The lab's human-readable outputs: markdown tables and PNG charts of probe latency.

The table follows the reference evidence's shape (one request at a time, the worst /health
probe per request, stock against patched). request_chart draws one panel per request with both
arms' probes against the time since that request was sent; timeline_chart draws one panel per
arm over a whole phase (the flood). matplotlib runs headless (Agg).
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


ARM_COLORS = {"stock": "C3", "v3": "C0"}
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
            color = ARM_COLORS.get(arm, "C2")
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
