"""Sums of an engine's own /metrics samples: what the engine itself says it holds and served.

SGLang exports them with `--enable-metrics` (every committed engine runs it): the scheduler's
in-flight gauges (the drain waits for them to read 0) and the tokenizer manager's
`sglang:num_requests_total`, counted once per finished request, which is how verification
learns that a request sent through the proxy was served by this replica and not another one.
"""

from __future__ import annotations

import http.client

from lab.in_container import metrics_text

IN_FLIGHT_GAUGES = ("sglang:num_running_reqs", "sglang:num_queue_reqs")
SERVED_COUNTER = ("sglang:num_requests_total",)


class MetricsError(Exception):
    pass


def metric_sum(host: str, port: int, names: tuple[str, ...], timeout_s: float = 10.0) -> float:
    """The sum of every sample of `names` (all label sets) on http://host:port/metrics."""
    conn = http.client.HTTPConnection(host, port, timeout=timeout_s)
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        status, body = response.status, response.read()
    except (OSError, http.client.HTTPException) as err:
        raise MetricsError(f"GET http://{host}:{port}/metrics: {err or type(err).__name__}") from None
    finally:
        conn.close()
    if status != 200:
        raise MetricsError(f"http://{host}:{port}/metrics answered {status}: the engine must run with --enable-metrics")
    try:
        samples = metrics_text.parse(body.decode())
    except metrics_text.MetricsParseError as err:
        raise MetricsError(f"http://{host}:{port}/metrics: {err}") from None
    found = [s for s in samples if s.name in names]
    if not found:
        raise MetricsError(f"http://{host}:{port}/metrics has none of {', '.join(names)} (is --enable-metrics on?)")
    return sum(s.value for s in found)
