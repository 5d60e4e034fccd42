"""The quick mode's pass/fail rule (issue 8, "Done means")."""

from __future__ import annotations

QUICK_REQUESTS = ("chat_4.7MB", "generate_5MB")
V3_WORST_BELOW_MS = 250.0
STOCK_WORST_ABOVE_MS = 1000.0


def quick_failures(results: dict, requests: tuple[str, ...] = QUICK_REQUESTS) -> list[str]:
    """Why `results` fails the quick rule (empty when it passes).

    On each request: v3's worst probe < 250 ms, stock's > 1,000 ms, and the same prompt_tokens
    on both arms (both servers tokenized the same bytes the same way).
    """
    by_name = {entry["name"]: entry for entry in results.get("requests", [])}
    failures = []
    for name in requests:
        entry = by_name.get(name)
        if entry is None:
            failures.append(f"{name}: not in results.json")
            continue
        stock, v3 = entry.get("stock"), entry.get("v3")
        if stock is None or v3 is None:
            failures.append(f"{name}: the quick rule compares the stock and v3 arms; run both (--arms stock,v3)")
            continue
        if not v3["worst_ms"] < V3_WORST_BELOW_MS:
            failures.append(f"{name}: v3 worst probe {v3['worst_ms']:.0f} ms, expected < {V3_WORST_BELOW_MS:.0f} ms")
        if not stock["worst_ms"] > STOCK_WORST_ABOVE_MS:
            failures.append(f"{name}: stock worst probe {stock['worst_ms']:.0f} ms, expected > {STOCK_WORST_ABOVE_MS:.0f} ms")
        if stock["prompt_tokens"] != v3["prompt_tokens"]:
            failures.append(f"{name}: prompt_tokens differ: stock {stock['prompt_tokens']}, v3 {v3['prompt_tokens']}")
    return failures
