"""The quick mode's pass/fail rule (issue 8, "Done means"), and the v3 offload counters."""

from __future__ import annotations

from lab.offload import mm_process_failures, offload_failures

QUICK_REQUESTS = ("chat_4.7MB", "generate_5MB")
V3_WORST_BELOW_MS = 250.0
STOCK_WORST_ABOVE_MS = 1000.0


def quick_failures(results: dict, requests: tuple[str, ...] = QUICK_REQUESTS, baseline: bool = True) -> list[str]:
    """Why `results` fails the quick rule (empty when it passes).

    On each request: v3's worst probe < 250 ms, stock's > 1,000 ms, and the same prompt_tokens
    on both arms (both servers tokenized the same bytes the same way). And on v3, by its own
    /metrics counters (results["offload"]["v3"], lab/offload.py): in every phase that sent large
    prompts, tokenizer_process.uses grew by at least their number and tokenizer_process.fallbacks
    did not grow; counters missing on v3 fail too.

    baseline=False is v3's half of the rule, for a run of the v3 arm alone (health_stall
    --check-v3): v3's worst probe and its counters, nothing compared with stock. The stock arm is
    what shows the requests do stall a server; that half runs in //lab:quick_test.
    """
    by_name = {entry["name"]: entry for entry in results.get("requests", [])}
    failures = []
    for name in requests:
        entry = by_name.get(name)
        if entry is None:
            failures.append(f"{name}: not in results.json")
            continue
        stock, v3 = entry.get("stock"), entry.get("v3")
        if v3 is None or (baseline and stock is None):
            failures.append(f"{name}: the quick rule compares the stock and v3 arms; run both (--arms stock,v3)"
                            if baseline else f"{name}: no v3 arm in results.json (--arms v3)")
            continue
        if not v3["worst_ms"] < V3_WORST_BELOW_MS:
            failures.append(f"{name}: v3 worst probe {v3['worst_ms']:.0f} ms, expected < {V3_WORST_BELOW_MS:.0f} ms")
        if not baseline:
            continue
        if not stock["worst_ms"] > STOCK_WORST_ABOVE_MS:
            failures.append(f"{name}: stock worst probe {stock['worst_ms']:.0f} ms, expected > {STOCK_WORST_ABOVE_MS:.0f} ms")
        if stock["prompt_tokens"] != v3["prompt_tokens"]:
            failures.append(f"{name}: prompt_tokens differ: stock {stock['prompt_tokens']}, v3 {v3['prompt_tokens']}")
    if any("v3" in entry for entry in results.get("requests", [])):
        failures += offload_failures(results, "v3") + mm_process_failures(results, "v3")
    return failures


# Issue 12's targets, measured by the full run (a benchmark that prints numbers, not a test).
TEXT_TARGET_MS = 10.0  # worst /health, 4.7 MB chat and 5 MB /generate
IMAGES_TARGET_MS = 20.0  # worst /health, 64 x 9 MP and 16 x 48 MP
MIXED_TARGET_MS = 20.0  # worst /health during mixed traffic (and 0 errors, 0 changed prompts)
DISPATCH_TARGET_MS = 50.0  # small-chat dispatch delay while a 5 MB conversion runs
# Issue 37 states the /health targets against the design's own delay: a probe's latency minus
# the host's part (the loop's and the prober's runqueue waits, the CPUs' steal; lab/results.py's
# split_probe), over every probe of the windows, with the text and image bounds above.


def target_rows(results: dict, dispatch: dict, mixed: dict, arm: str, baseline: str = "stock") -> list[tuple[str, str, str, bool | None]]:
    """(measure, target, value, met) for one arm; met is None when the run did not measure it."""
    by_name = {entry["name"]: entry for entry in results.get("requests", [])}
    rows: list[tuple[str, str, str, bool | None]] = []

    def worst(name: str, bound: float, label: str, same_prompt: bool = False) -> None:
        entry = by_name.get(name)
        if entry is None or arm not in entry:
            rows.append((label, f"<= {bound:g} ms", "not measured", None))
            return
        stats = entry[arm]
        met = stats["worst_ms"] <= bound
        value = f"{stats['worst_ms']:,.1f} ms"
        if same_prompt and baseline in entry:
            equal = stats["prompt_tokens"] == entry[baseline]["prompt_tokens"]
            value += ", prompt tokens " + ("= " if equal else "!= ") + baseline
            met = met and equal
        rows.append((label, f"<= {bound:g} ms" + (f", prompt tokens = {baseline}" if same_prompt else ""), value, met))

    worst("chat_4.7MB", TEXT_TARGET_MS, "worst /health, 4.7 MB chat", True)
    worst("generate_5MB", TEXT_TARGET_MS, "worst /health, 5 MB /generate", True)
    worst("multimodal_64x9MP", IMAGES_TARGET_MS, "worst /health, 64 x 9 MP images")
    worst("multimodal_16x48MP", IMAGES_TARGET_MS, "worst /health, 16 x 48 MP images")
    m = mixed.get(arm)
    if m is None:
        rows.append(("mixed traffic", "0 errors, 0 changed prompts, worst <= 20 ms", "not measured", None))
    else:
        errors = sum(m["errors"].values())
        # Older results.json files have no image check: their image requests count as unknown.
        images = m.get("image_requests", {"changed": 0, "unknown": 1})
        changed = m["tool_prompts"]["changed"] + images["changed"]
        unknown = m["tool_prompts"]["unknown"] + images["unknown"]
        met = errors == 0 and m["server_log_already_borrowed"] == 0 and changed == 0 and unknown == 0 \
            and m["worst_ms"] <= MIXED_TARGET_MS
        rows.append(("mixed traffic", f"0 errors, 0 changed prompts, worst <= {MIXED_TARGET_MS:g} ms",
                     f"{errors} errors ({m['server_log_already_borrowed']} 'Already borrowed' in the log),"
                     f" {changed} changed / {unknown} unknown prompts or image features, worst {m['worst_ms']:,.1f} ms", met))
    design = results.get("worst_probes", {}).get(arm, {})

    def design_delay(names: tuple[str, ...], bound: float, label: str) -> None:
        splits = [design[name]["worst_remainder"] for name in names if name in design]
        if not splits or None in splits:
            rows.append((label, f"<= {bound:g} ms", "not measured", None))
            return
        worst_split = max(splits, key=lambda split: split["remainder_ms"])
        rows.append((label, f"<= {bound:g} ms",
                     f"{worst_split['remainder_ms']:,.1f} ms (of a {worst_split['ms']:,.1f} ms probe)",
                     worst_split["remainder_ms"] <= bound))

    design_delay(("chat_4.7MB", "generate_5MB"), TEXT_TARGET_MS,
                 "design's own delay (/health minus host waits and steal), text requests")
    design_delay(("multimodal_64x9MP", "multimodal_16x48MP"), IMAGES_TARGET_MS,
                 "design's own delay, image requests")
    design_delay(("mixed",), MIXED_TARGET_MS, "design's own delay, mixed traffic")
    rows.append(_mm_process_row(results, arm))
    delay = (dispatch.get(arm) or {}).get("small_chat_during_5MB", "absent")
    if delay == "absent":
        rows.append(("small-chat dispatch during a 5 MB conversion", f"<= {DISPATCH_TARGET_MS:g} ms", "not measured", None))
    else:
        rows.append(("small-chat dispatch during a 5 MB conversion", f"<= {DISPATCH_TARGET_MS:g} ms",
                     "never arrived" if delay is None else f"{delay:,.1f} ms", delay is not None and delay <= DISPATCH_TARGET_MS))
    return rows


def _mm_process_row(results: dict, arm: str) -> tuple[str, str, str, bool | None]:
    """Whether the arm's image requests went through the multimodal child processes."""
    label, target = "image requests processed in child processes", "mm_process uses >= image requests, 0 fallbacks"
    phases = ((results.get("offload") or {}).get(arm) or {}).get("phases", {})
    sent = {name: p["image_requests"] for name, p in phases.items() if p.get("image_requests")}
    if not sent:
        return label, target, "not measured (no image requests scraped)", None
    if all(phases[name].get("delta") is None for name in sent):
        return label, target, "no offload counters", None
    uses = sum((phases[name].get("delta") or {}).get("mm_process.uses", 0) for name in sent)
    failures = mm_process_failures(results, arm)
    return label, target, f"{uses:g} uses for {sum(sent.values())} image requests" + (
        "; " + "; ".join(failures) if failures else ""), not failures
