"""Takes a replica out of the proxy's rotation before it is stopped, and puts it back after.

Two parts, each from its own source of truth:

* the proxy's drain API (`Drainer`): `POST /_rollout/drain?backend=HOST` stops new requests to
  the backend, `POST /_rollout/restore?backend=HOST` routes to it again, `GET
  /_rollout/backends` reports each backend's state. The rehearsal's proxy stand-in speaks it
  (deploy/rollout/in_container/standin.py); the production proxy (vllm-proxy-rs) documents no
  such endpoint (backend membership is `VLLM_BACKEND_URLS` plus a restart), which is why
  `apply` needs either `--drain-via` or an explicit `--no-drain` (docs/rollout.md, "Drain");
* the engine's own in-flight count (`in_flight`): SGLang's scheduler gauges
  `sglang:num_running_reqs` + `sglang:num_queue_reqs` on its `/metrics` (`--enable-metrics`,
  which every committed engine runs with). The stop waits until they read 0, so a stream the
  proxy had already sent is not cut.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import quote

from deploy.rollout.engine_metrics import IN_FLIGHT_GAUGES, MetricsError, metric_sum
from deploy.rollout.http_call import http_request

CONTROL = "/_rollout"


class DrainError(Exception):
    pass


def _call(host: str, port: int, method: str, path: str, timeout_s: float) -> tuple[int, bytes]:
    status, headers, body = http_request(f"http://{host}:{port}{path}", timeout_s, method=method)
    if status == 0:
        raise DrainError(f"{method} http://{host}:{port}{path}: {headers['error']}")
    return status, body


@dataclass(frozen=True)
class Drainer:
    """The proxy's drain API at host:port (the proxy container's address)."""

    host: str
    port: int
    timeout_s: float = 10.0

    def _set(self, action: str, backend: str) -> None:
        path = f"{CONTROL}/{action}?backend={quote(backend)}"
        status, body = _call(self.host, self.port, "POST", path, self.timeout_s)
        if status != 200:
            raise DrainError(f"POST http://{self.host}:{self.port}{path} answered {status}: "
                             f"{body[:200].decode(errors='replace').strip()} (docs/rollout.md, \"Drain\")")

    def drain(self, backend: str) -> None:
        self._set("drain", backend)

    def restore(self, backend: str) -> None:
        self._set("restore", backend)

    def draining(self, backend: str) -> bool:
        status, body = _call(self.host, self.port, "GET", f"{CONTROL}/backends", self.timeout_s)
        if status != 200:
            raise DrainError(f"GET http://{self.host}:{self.port}{CONTROL}/backends answered {status}")
        return any(b.get("host") == backend and b.get("draining") for b in json.loads(body).get("backends", []))


def in_flight(host: str, port: int, timeout_s: float = 10.0) -> float:
    """Running + queued requests of the engine at host:port, from its /metrics."""
    try:
        return metric_sum(host, port, IN_FLIGHT_GAUGES, timeout_s)
    except MetricsError as err:
        raise DrainError(f"{err}: the in-flight count cannot be read") from None
