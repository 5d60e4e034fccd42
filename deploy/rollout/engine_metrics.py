"""Sums of an engine's own /metrics samples: what the engine itself says it holds and served.

SGLang exports them with `--enable-metrics` (every committed engine runs it): the scheduler's
in-flight gauges (the drain waits for them to read 0) and the tokenizer manager's
`sglang:num_requests_total`, counted once per finished request, which is how verification
learns that a request sent through the proxy was served by this replica and not another one.
"""

from __future__ import annotations


from deploy.rollout.http_call import http_request
from tools.sglang_server.in_container import metrics_text

IN_FLIGHT_GAUGES = ("sglang:num_running_reqs", "sglang:num_queue_reqs")
SERVED_COUNTER = ("sglang:num_requests_total",)


class MetricsError(Exception):
    pass


def metric_sum(host: str, port: int, names: tuple[str, ...], timeout_s: float = 10.0) -> float:
    """The sum of every sample of `names` (all label sets) on http://host:port/metrics."""
    status, headers, body = http_request(f"http://{host}:{port}/metrics", timeout_s)
    if status == 0:
        raise MetricsError(f"GET http://{host}:{port}/metrics: {headers['error']}")
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
