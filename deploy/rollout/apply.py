"""Applies a planned rollout with the pinned Compose binary, gated, with automatic rollback.

Before anything stops, every named service's image is pulled (`pull --policy missing`) and
must then be present: a release that cannot be fetched fails the rollout with every container
untouched. Then, for each named service, in the order given:

0. the other engines, which keep serving meanwhile, must be healthy now (else nothing stops);
1. drain (engines, with `--drain-via`): the proxy stops routing new requests to the replica,
   then the engine's own in-flight gauges (drain.py) must read 0 before the stop;
2. stop the old container with the service's own grace period (`stop -t`), remove it;
3. `up --detach --no-deps --wait --wait-timeout T SERVICE` from the target revision (only that
   service: dependencies and every other container stay as they are);
4. health gate: `/health` on the new container's address answers 200 N times in a row within
   the timeout, and (engines) its log has SGLang's ready line and no fatal line;
5. the check (engines): the compose file's own check service (`--check-service`, the
   perception check) run once against this replica's address, directly, not through the proxy;
6. restore: the replica goes back into the proxy's rotation;
7. verification: a chat completion on the replica's own address, then chat completions through
   the proxy path (`--verify-url`), all answering 200, until one is shown served by the replica
   (its own `sglang:num_requests_total` rose across the request, or the proxy's
   `--verify-upstream-header` names it), within a bound;
8. bake: for `--bake-s`, `/health` keeps answering 200 and the container neither exits nor
   restarts.

Any failure rolls every service this run touched back to the deployed revision (the same
steps from the other file, health-gated, then restored to the proxy) and says so. Each step is
written to the journal first, so an interrupted run can be resumed or rolled back; a resumed
service whose container already runs the target revision is not replaced again.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Callable
from urllib.parse import urlsplit

from deploy.rollout import journal as jr
from deploy.rollout.compose_cli import Compose, ComposeError, ServiceState
from deploy.rollout.docker_api import DockerAPI, DockerAPIError
from deploy.rollout.drain import DrainError, Drainer, in_flight
from deploy.rollout.engine_metrics import SERVED_COUNTER, MetricsError, metric_sum
from deploy.rollout.http_call import http_request
from deploy.rollout.manager import ManagerClient, ManagerError

RUNBOOK = "docs/rollout.md"
# SGLang logs this once it serves (after the warm-up, or at once with --skip-server-warmup).
READY_LINE = "The server is fired up and ready to roll!"
# A line with one of these in an engine's startup log fails the roll even when /health answers:
# the engine is up but broke on the way (a CUDA fault such as error 801, an OOM, a traceback).
FATAL_MARKERS = ("CUDA error", "CUDA out of memory", "OutOfMemoryError", "Traceback (most recent call last)",
                 "Fatal Python error")


class StepFailed(Exception):
    def __init__(self, service: str, step: str, reason: str) -> None:
        super().__init__(f"{service}: {step} failed: {reason}")
        self.service, self.step, self.reason = service, step, reason


@dataclass(frozen=True)
class Gates:
    # Covers the documented cold start (up to ~50 min) and the engines' start_period (3600 s).
    wait_timeout_s: float = 3600.0
    health_timeout_s: float = 600.0
    health_path: str = "/health"
    healthy_probes: int = 3
    probe_interval_s: float = 1.0
    probe_timeout_s: float = 3.0
    verify_url: str | None = None
    verify_requests: int = 4
    verify_timeout_s: float = 60.0  # one request through the proxy path
    verify_within_s: float = 300.0  # until a request through the proxy is shown served by the new container
    verify_upstream_header: str | None = None
    verify_token: str | None = None  # bearer token for the proxy; never printed
    bake_s: float = 60.0
    max_restarts: int = 1  # a restart while `up --wait` waits: the new container crash-loops
    pull_timeout_s: float = 3600.0  # a 20-40 GB engine image
    drain_via: str | None = None  # the proxy service whose drain API (drain.py) takes a replica out
    drain_port: int = 8000
    drain_timeout_s: float = 300.0  # until the engine's in-flight gauges read 0
    check_service: str | None = None  # the compose service that checks one replica (perception)
    check_env: str = "PERCEPTION_TARGETS"  # how the check is told the replica: NAME=URL
    check_timeout_s: float = 900.0
    manager_url: str | None = None  # the host's compose manager (manager.py): paused for the roll
    manager_token: str | None = None  # its bearer token; never printed


def http_get(url: str, timeout_s: float, token: str | None = None) -> tuple[int, dict[str, str]]:
    status, headers, _ = http_request(url, timeout_s, token)
    return status, headers


def chat_request(model: str | None) -> dict:
    """The smallest chat completion an engine must serve (one token; GLM may spend it thinking)."""
    return {"model": model or "default", "max_tokens": 1, "temperature": 0,
            "messages": [{"role": "user", "content": "Say ok."}]}


def _has_choices(body: bytes) -> bool:
    try:
        return bool(json.loads(body).get("choices"))
    except (ValueError, AttributeError):
        return False


class Rollout:
    def __init__(self, journal: jr.Journal, deployed: Compose, target: Compose, gates: Gates, docker: DockerAPI,
                 deployed_states: dict[str, ServiceState], target_states: dict[str, ServiceState],
                 say: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep) -> None:
        self.journal, self.deployed, self.target, self.gates, self.docker = journal, deployed, target, gates, docker
        self.deployed_states, self.target_states = deployed_states, target_states
        self.say, self.sleep = say, sleep
        self.manager = ManagerClient(gates.manager_url, gates.manager_token) if gates.manager_url else None

    # -- gates ---------------------------------------------------------------------------------

    def _health_url(self, service: str, container_id: str, states: dict[str, ServiceState]) -> str | None:
        """The engine's /health URL on its container address; None for a service with no /health."""
        port = states[service].health_port if service in states else None
        if port is None:
            return None
        state = self.docker.state(container_id)
        if not state.addresses:
            raise StepFailed(service, "health gate", f"container {container_id[:12]} has no network address")
        return f"http://{state.addresses[0]}:{port}{self.gates.health_path}"

    def health_gate(self, service: str, container_id: str, states: dict[str, ServiceState]) -> None:
        g = self.gates
        url = self._health_url(service, container_id, states)
        if url is None:
            # Not an engine: `up --wait` already waited for its healthcheck; it must still run.
            state = self.docker.state(container_id)
            if not state.running or state.health not in (None, "healthy"):
                raise StepFailed(service, "health gate", f"container {container_id[:12]} running={state.running} "
                                 f"health={state.health}")
            self.say(f"rollout: {service}: running, health {state.health or 'n/a'} (no /health: not an engine)")
            return
        deadline = time.monotonic() + g.health_timeout_s
        streak, probes, last = 0, 0, "no probe yet"
        while streak < g.healthy_probes:
            if time.monotonic() > deadline:
                raise StepFailed(service, "health gate", f"{url} not healthy {g.healthy_probes}x in a row within "
                                 f"{g.health_timeout_s:.0f} s ({probes} probes; last: {last})")
            status, headers = http_get(url, g.probe_timeout_s)
            probes += 1
            streak = streak + 1 if status == 200 else 0
            last = f"HTTP {status}" if status else headers["error"]
            if streak < g.healthy_probes:
                self.sleep(g.probe_interval_s)
        self.say(f"rollout: {service}: health gate passed ({url}, {probes} probes)")

    def startup_log_gate(self, service: str, container_id: str) -> None:
        """An engine's log says it is ready and has no fatal line (bounded by the health timeout)."""
        g = self.gates
        if self.target_states.get(service) is None or self.target_states[service].health_port is None:
            return
        deadline = time.monotonic() + g.health_timeout_s
        while True:
            lines = self.docker.logs(container_id).splitlines()
            fatal = [line for line in lines if any(marker in line for marker in FATAL_MARKERS)]
            if fatal:
                raise StepFailed(service, "startup log", f"container {container_id[:12]} logged {len(fatal)} fatal "
                                 f"line(s), the first: {fatal[0].strip()[:300]!r} (`docker logs {service}`)")
            if any(READY_LINE in line for line in lines):
                break
            if time.monotonic() > deadline:
                raise StepFailed(service, "startup log", f"container {container_id[:12]} has not logged {READY_LINE!r} "
                                 f"within {g.health_timeout_s:g} s ({len(lines)} lines; `docker logs {service}`)")
            self.sleep(g.probe_interval_s)
        self.say(f"rollout: {service}: startup log says ready, no fatal line ({len(lines)} lines)")

    def peers_healthy(self, service: str) -> None:
        """Every other engine keeps serving while `service` is replaced, so it must be healthy
        now: running, not unhealthy by its own healthcheck, and /health 200 each of
        `healthy_probes` probes. Nothing has stopped when this refuses."""
        g = self.gates
        if service not in self.deployed_states or self.deployed_states[service].health_port is None:
            return
        peers = sorted(n for n, s in self.target_states.items() if s.health_port is not None and n != service)
        for peer in peers:
            role = f"{peer}, which keeps serving while {service} is replaced,"
            fix = f"nothing stops until it is healthy: look at `docker logs {peer}` ({RUNBOOK}, \"Canary on r2\")"
            cid = self.target.container_id(peer)
            if cid is None:
                raise StepFailed(service, "peer check", f"{role} has no container; {fix}")
            state = self.docker.state(cid)
            if not state.running or state.health not in (None, "healthy"):
                raise StepFailed(service, "peer check", f"{role} is not healthy (container {cid[:12]} running="
                                 f"{state.running}, health {state.health}); {fix}")
            url = self._health_url(peer, cid, self.target_states)
            for probe in range(1, g.healthy_probes + 1):
                status, headers = http_get(url, g.probe_timeout_s)
                if status != 200:
                    answer = f"HTTP {status}" if status else headers["error"]
                    raise StepFailed(service, "peer check", f"{role} answered {answer} on {url} (probe {probe} of "
                                     f"{g.healthy_probes}); {fix}")
                if probe < g.healthy_probes:
                    self.sleep(g.probe_interval_s)
        if peers:
            self.say(f"rollout: {service}: {', '.join(peers)} healthy ({g.healthy_probes} probes each): "
                     f"they keep serving while {service} is replaced")

    def _served(self, service: str, url: str) -> float:
        host, port = urlsplit(url).hostname, urlsplit(url).port
        try:
            return metric_sum(host, port, SERVED_COUNTER, self.gates.probe_timeout_s)
        except MetricsError as err:
            raise StepFailed(service, "verification", f"{err}: cannot tell whether {service} served") from None

    def verify_direct(self, service: str, container_id: str) -> str | None:
        """A chat completion on the replica's own address; returns that address's base URL."""
        g = self.gates
        state = self.target_states.get(service)
        if state is None or state.health_port is None:
            return None
        addresses = self.docker.state(container_id).addresses
        if not addresses:
            raise StepFailed(service, "verification", f"container {container_id[:12]} has no network address")
        base = f"http://{addresses[0]}:{state.health_port}"
        status, headers, body = http_request(f"{base}/v1/chat/completions", g.verify_timeout_s, body=chat_request(state.model))
        if status != 200 or not _has_choices(body):
            answer = f"HTTP {status}: {body[:200]!r}" if status else f"no answer ({headers['error']})"
            raise StepFailed(service, "verification", f"a chat completion on {service}'s own address {base}: {answer}")
        self.say(f"rollout: {service}: served a chat completion on its own address {base}")
        return base

    def verify(self, service: str, container_id: str) -> None:
        """A request on the replica's own address, then requests through the proxy path, each
        answered 200, until one is shown served by this replica: the proxy's upstream header
        names it, or the replica's own served-request counter rose across the request. An
        answer the proxy can give alone (e.g. /v1/models) proves nothing and is not used."""
        g = self.gates
        if not g.verify_url:
            return
        own = self.verify_direct(service, container_id)
        state = self.target_states.get(service)
        model = state.model if state and state.model else next(
            (s.model for s in self.target_states.values() if s.model), None)
        header = (g.verify_upstream_header or "").lower()
        deadline = time.monotonic() + g.verify_within_s
        upstreams: list[str] = []
        proof: str | None = None
        slowest, count = 0.0, None
        while True:
            before = self._served(service, own) if own and proof is None else None
            start = time.monotonic()
            status, headers, body = http_request(g.verify_url, g.verify_timeout_s, g.verify_token, chat_request(model))
            took = time.monotonic() - start
            slowest = max(slowest, took)
            upstream = headers.get(header, "") if header else ""
            if status != 200 or not _has_choices(body):
                answer = (f"HTTP {status}" + ("" if status != 200 else " without choices") if status
                          else f"no answer within {g.verify_timeout_s:g} s ({headers['error']})")
                raise StepFailed(service, "verification", f"request {len(upstreams) + 1} through {g.verify_url}: {answer}"
                                 f" after {took:.1f} s" + (f" ({g.verify_upstream_header}: {upstream})" if upstream else "")
                                 + (f"; the proxy's errors: {headers['x-upstream-errors']}" if "x-upstream-errors" in headers else ""))
            upstreams.append(upstream)
            if own and proof is None:
                count = self._served(service, own)
                if header and service in upstream:
                    proof = f"{g.verify_upstream_header}: {upstream}"
                elif count > before:
                    proof = f"{service}'s {SERVED_COUNTER[0]} {before:g} -> {count:g} across request {len(upstreams)}"
            if len(upstreams) >= g.verify_requests and (own is None or proof):
                break
            if own and proof is None and time.monotonic() > deadline:
                seen = f"; {g.verify_upstream_header}: {sorted(set(upstreams))}" if header else ""
                raise StepFailed(service, "verification", f"none of {len(upstreams)} requests through {g.verify_url} "
                                 f"within {g.verify_within_s:g} s was served by {service} (its {SERVED_COUNTER[0]} "
                                 f"stayed at {count:g}{seen}): the proxy does not route to it ({RUNBOOK}, \"Verify\")")
            self.sleep(g.probe_interval_s)
        self.say(f"rollout: {service}: verified through {g.verify_url} ({len(upstreams)} requests, slowest {slowest:.1f} s"
                 + (f"; served by {service}: {proof})" if proof else ")"))

    def bake(self, service: str, container_id: str) -> None:
        g = self.gates
        if g.bake_s <= 0:
            return
        url = self._health_url(service, container_id, self.target_states)
        first = self.docker.state(container_id)
        deadline = time.monotonic() + g.bake_s
        probes = 0
        while time.monotonic() < deadline:
            self.sleep(g.probe_interval_s)
            state = self.docker.state(container_id)
            if not state.running or state.restart_count != first.restart_count:
                raise StepFailed(service, "bake", f"container {container_id[:12]} stopped or restarted while baking")
            probes += 1
            if url is None:
                continue
            status, headers = http_get(url, g.probe_timeout_s)
            if status != 200:
                raise StepFailed(service, "bake", f"{url} answered " + (f"HTTP {status}" if status else headers["error"])
                                 + f" after {probes} good probes")
        self.say(f"rollout: {service}: baked {g.bake_s:.0f} s ({probes} probes, no restart)")

    # -- steps ---------------------------------------------------------------------------------

    def _crash_loop(self, project: str, service: str) -> str | None:
        """Why waiting for the service is pointless (it keeps restarting), or None."""
        for cid in self.docker.container_ids(project, service):
            restarts = self.docker.state(cid).restart_count
            if restarts >= self.gates.max_restarts:
                return f"container {cid[:12]} restarted {restarts} times while starting (crash loop)"
        return None

    def _replace(self, service: str, old: Compose, old_states: dict[str, ServiceState], new: Compose) -> str:
        """Stops and removes the service's container, starts it from `new`; returns the new id."""
        old_id = new.container_id(service)
        grace = old_states[service].grace_s if service in old_states else 10.0
        start = time.monotonic()
        if old_id:
            self.say(f"rollout: {service}: stopping {old_id[:12]} (grace {grace:.0f} s)")
            old.stop(service, grace)
            old.remove(service)
            self.say(f"rollout: {service}: {old_id[:12]} stopped and removed in {time.monotonic() - start:.1f} s")
        start = time.monotonic()
        try:
            new.up(service, self.gates.wait_timeout_s, watch=lambda: self._crash_loop(new.project, service))
        except ComposeError as err:
            raise StepFailed(service, "up --wait", str(err)) from None
        new_id = new.container_id(service)
        if not new_id:
            raise StepFailed(service, "up --wait", "Compose reports no container afterwards")
        self.say(f"rollout: {service}: container {old_id[:12] if old_id else '-'} -> {new_id[:12]}"
                 f" (up --wait returned in {time.monotonic() - start:.1f} s)")
        return new_id

    # -- pull, drain, check -----------------------------------------------------------------

    def pull(self) -> None:
        """Every service still to roll has its target image here, before anything stops."""
        for service in self.journal.services:
            if self.journal.entries[service].step == jr.ROLLED:
                continue
            image = self.target_states[service].image
            start = time.monotonic()
            try:
                self.target.pull(service, self.gates.pull_timeout_s)
            except ComposeError as err:
                raise StepFailed(service, "pull", str(err)) from None
            if image and not self.docker.image_present(image):
                raise StepFailed(service, "pull", f"{image} is not present after the pull")
            self.say(f"rollout: {service}: image {image} present ({time.monotonic() - start:.1f} s)")

    def _address(self, service: str, compose: Compose) -> str:
        cid = compose.container_id(service)
        if cid is None:
            raise StepFailed(service, "drain", f"{service} has no container")
        state = self.docker.state(cid)
        if not state.addresses:
            raise StepFailed(service, "drain", f"container {cid[:12]} of {service} has no network address")
        return state.addresses[0]

    def _drainer(self) -> Drainer:
        return Drainer(self._address(self.gates.drain_via, self.target), self.gates.drain_port)

    def drain(self, service: str) -> None:
        """Out of the proxy's rotation, then until the old engine holds no request."""
        g = self.gates
        if g.drain_via is None or self.deployed_states[service].health_port is None:
            return
        start = time.monotonic()
        try:
            self._drainer().drain(service)
            self.journal.record(service, self.journal.entries[service].step, "drained", drained=True)
            if self.deployed.container_id(service) is None:  # an interrupted run already removed it
                self.say(f"rollout: {service}: drained from {g.drain_via} (no container: nothing in flight)")
                return
            host, port = self._address(service, self.deployed), self.deployed_states[service].health_port
            deadline = time.monotonic() + g.drain_timeout_s
            while (count := in_flight(host, port)) > 0:
                if time.monotonic() > deadline:
                    self.restore(service)
                    raise StepFailed(service, "drain", f"{count:g} requests still in flight on {host}:{port} after "
                                     f"{g.drain_timeout_s:g} s (--drain-timeout-s); put back into the proxy, not stopped")
                self.sleep(g.probe_interval_s)
        except DrainError as err:
            self.restore(service)
            raise StepFailed(service, "drain", f"{err}; not stopped") from None
        self.say(f"rollout: {service}: drained from {g.drain_via} (in flight 0 after {time.monotonic() - start:.1f} s)")

    def restore(self, service: str) -> None:
        if not self.journal.entries[service].drained:
            return
        try:
            self._drainer().restore(service)
        except (DrainError, StepFailed) as err:
            raise StepFailed(service, "restore", f"{err}; put it back by hand ({RUNBOOK}, \"Drain\")") from None
        self.journal.record(service, self.journal.entries[service].step, "restored", drained=False)
        self.say(f"rollout: {service}: back in {self.gates.drain_via}'s rotation")

    def check(self, service: str, states: dict[str, ServiceState]) -> None:
        """The compose file's check service run against this replica, directly."""
        g = self.gates
        port = states[service].health_port
        if g.check_service is None or port is None:
            return
        start = time.monotonic()
        target = f"{service}=http://{service}:{port}"
        code, output = self.target.run_check(g.check_service, {g.check_env: target}, g.check_timeout_s)
        if code != 0:
            raise StepFailed(service, "check", f"{g.check_service} ({g.check_env}={target}) exited {code}:\n{output[-2000:]}")
        self.say(f"rollout: {service}: {g.check_service} passed against http://{service}:{port} "
                 f"({time.monotonic() - start:.1f} s)")

    # -- steps ---------------------------------------------------------------------------------

    def _runs_target(self, service: str) -> str | None:
        """The service's container id when it already runs the target revision (a resumed run)."""
        cid = self.target.container_id(service)
        if cid and self.docker.config_hash(cid) == self.target_states[service].compose_hash:
            return cid
        return None

    def roll(self, service: str) -> None:
        j = self.journal
        resumed = j.entries[service].step != jr.PENDING and self._runs_target(service)
        if resumed:
            # Interrupted after the target's container was created: wait for it, do not replace it.
            self.say(f"rollout: {service}: resuming; container {resumed[:12]} already runs {j.to_label}")
            try:
                self.target.up(service, self.gates.wait_timeout_s, watch=lambda: self._crash_loop(self.target.project, service))
            except ComposeError as err:
                raise StepFailed(service, "up --wait", str(err)) from None
            new_id = self.target.container_id(service) or resumed
        else:
            self.peers_healthy(service)
            self.drain(service)
            j.record(service, jr.STOPPING, "", old_container=self.target.container_id(service))
            new_id = self._replace(service, self.deployed, self.deployed_states, self.target)
        j.record(service, jr.STARTED, new_id, new_container=new_id)
        self.health_gate(service, new_id, self.target_states)
        self.startup_log_gate(service, new_id)
        j.record(service, jr.HEALTHY)
        self.check(service, self.target_states)
        self.restore(service)
        self.verify(service, new_id)
        j.record(service, jr.VERIFIED)
        self.bake(service, new_id)
        j.record(service, jr.ROLLED)

    # -- the compose manager's handover ----------------------------------------------------------

    def pause_manager(self) -> None:
        """The manager stops reconciling the named services before any of them stops."""
        j = self.journal
        if self.manager is None:
            return
        try:
            self.manager.pause(j.services, f"rollout {j.path}")
        except ManagerError as err:
            raise StepFailed(", ".join(j.services), "manager pause", f"{err}; the compose manager must stop "
                             f"reconciling them first ({RUNBOOK}, \"Compose manager\")") from None
        j.manager_paused = True
        j.record(None, "manager-paused", self.gates.manager_url or "")
        self.say(f"rollout: the compose manager ({self.gates.manager_url}) paused reconciling {', '.join(j.services)}")

    def resume_manager(self, label: str, file: str) -> int:
        """The manager reconciles the services again, against `label`; 0, or 4 if it refused."""
        j = self.journal
        if self.manager is None or not j.manager_paused:
            return 0
        try:
            self.manager.resume(j.services, label, file)
        except ManagerError as err:
            self.say(f"rollout: FAILED: the compose manager was not resumed: {err}; it still does not reconcile "
                     f"{', '.join(j.services)}: resume it against {label} ({RUNBOOK}, \"Compose manager\")")
            j.record(None, "manager-resume-failed", str(err))
            return 4
        j.manager_paused = False
        j.record(None, "manager-resumed", label)
        self.say(f"rollout: the compose manager reconciles {', '.join(j.services)} again, against {label}")
        return 0

    def apply(self) -> int:
        j = self.journal
        j.set_state(jr.APPLYING)
        try:
            self.pull()
            self.pause_manager()
            for service in j.services:
                if j.entries[service].step == jr.ROLLED:
                    self.say(f"rollout: {service}: already rolled (journal)")
                    continue
                self.roll(service)
        except (StepFailed, ComposeError, DockerAPIError) as err:
            self.say(f"rollout: FAILED: {err}")
            if not j.touched():
                step = err.step if isinstance(err, StepFailed) else ""
                section = {"pull": "Pull", "peer check": "Canary on r2", "manager pause": "Compose manager"}.get(step, "Drain")
                self.say(f"rollout: nothing was stopped; {', '.join(j.services)} run {j.from_label} as before "
                         f"({RUNBOOK}, \"{section}\")")
                j.set_state(jr.FAILED, str(err))
                return max(1, self.resume_manager(j.from_label, j.from_file))
            self.say(f"rollout: rolling back {', '.join(j.touched())} to {j.from_label} automatically ({RUNBOOK}, \"Rollback\")")
            j.set_state(jr.ROLLING_BACK, str(err))
            return self.rollback()
        j.set_state(jr.DONE)
        self.say(f"rollout: done: {', '.join(j.services)} on {j.to_label}")
        return self.resume_manager(j.to_label, j.to_file)

    def rollback(self) -> int:
        """Returns every touched service to the deployed revision; 1 when done, 3 if it failed."""
        j = self.journal
        j.set_state(jr.ROLLING_BACK)
        if self.manager is not None and not j.manager_paused:  # e.g. undoing a finished rollout
            try:
                self.pause_manager()
            except StepFailed as err:
                self.say(f"rollout: ROLLBACK FAILED: {err}; nothing was changed ({RUNBOOK}, \"Rollback\")")
                j.set_state(jr.ROLLBACK_FAILED, f"rollback: {err}")
                return 3
        for service in reversed(j.services):
            try:
                if service in j.touched():
                    new_id = self._replace(service, self.target, self.target_states, self.deployed)
                    self.health_gate(service, new_id, self.deployed_states)
                    j.record(service, jr.SERVICE_ROLLED_BACK, new_id, new_container=new_id)
                    self.say(f"rollout: {service}: rolled back to {j.from_label} (container {new_id[:12]}, healthy)")
                self.restore(service)
            except (StepFailed, ComposeError, DockerAPIError) as err:
                paused = " (the compose manager stays paused for them)" if j.manager_paused else ""
                self.say(f"rollout: ROLLBACK FAILED: {err}; the journal {j.path} keeps the state{paused} ({RUNBOOK}, \"Rollback\")")
                j.set_state(jr.ROLLBACK_FAILED, f"rollback: {err}")
                return 3
        j.set_state(jr.ROLLED_BACK)
        self.say(f"rollout: rolled back: {', '.join(j.services)} on {j.from_label}")
        return max(1, self.resume_manager(j.from_label, j.from_file))
