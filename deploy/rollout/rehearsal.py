"""What a rehearsal needs around the rollout tool: podman's Docker API, healthchecks, probes.

* `PodmanService`: `podman system service` on a private unix socket, configured only by the
  project's own containers.conf/storage.conf (tools/podman/podman_backend.PodmanConfig), in
  its own process group, stopped by that group's id.
* `HealthTicker`: podman schedules container healthchecks with systemd timers; without systemd
  (this machine) nothing runs them, so `up --wait` would wait forever. The ticker runs each
  running container's healthcheck through podman's own API at the check's own interval, as the
  timer would.
* `Prober`: GET /health of every engine's fixed address every 200 ms, each probe recorded with
  the phase it fell in.
* `Traffic`: a client's chat completions through the ingress (nginx -> proxy -> an engine)
  every 100 ms, each answer recorded with its phase and the replica that served it.
* `ManagerStandIn`: the host's compose manager, reconciling: every `interval_s` it runs
  `up --detach --remove-orphans` of the file it deployed last (`compose_pass`), over every
  service with a restart policy (what it keeps running), unless the rollout paused it, and
  serves the reconcile API the rollout pauses and resumes it with (deploy/rollout/manager.py)
  on 127.0.0.1.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from tools.podman import podman_backend
from deploy.rollout.compose_cli import Compose, ComposeError
from deploy.rollout.docker_api import DockerAPI, DockerAPIError
from deploy.rollout.manager import PAUSE, RESUME, STATE

PROJECT_LABEL = "com.docker.compose.project"


class RehearsalError(Exception):
    pass


# Beside the socket: what deploy/rollout/cli.py's --rehearsal requires of its Docker endpoint.
REHEARSAL_MARKER = "glm53-rehearsal-endpoint"


class PodmanService:
    """`registries_conf`: the service's own registries.conf (e.g. a loopback registry over http)."""

    def __init__(self, config: podman_backend.PodmanConfig, socket_path: Path, log: Path,
                 registries_conf: Path | None = None) -> None:
        self.config, self.socket_path, self.log_path = config, socket_path, log
        self.registries_conf = registries_conf
        self.proc: subprocess.Popen | None = None

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket_path}"

    def start(self, timeout_s: float = 30.0) -> None:
        self.config.write()
        self._log = self.log_path.open("ab")
        env = self.config.environment()
        # CNI's bridge plugin runs iptables from /usr/sbin, which a test's strict PATH lacks.
        env["PATH"] = ":".join([env.get("PATH", "/usr/bin:/bin"), "/usr/sbin", "/sbin"])
        if self.registries_conf is not None:
            env["CONTAINERS_REGISTRIES_CONF"] = str(self.registries_conf)
        (self.socket_path.parent / REHEARSAL_MARKER).write_text("a rehearsal's podman service (deploy/rollout/rehearsal.py)\n")
        self.proc = subprocess.Popen(
            ["podman", "system", "service", "--time=0", self.docker_host],
            env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout_s
        api = DockerAPI(self.docker_host)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RehearsalError(f"podman system service exited {self.proc.returncode}; see {self.log_path}")
            try:
                if api.request("GET", "/_ping", timeout_s=2)[0] == 200:
                    return
            except DockerAPIError:
                pass
            time.sleep(0.2)
        raise RehearsalError(f"podman system service did not answer on {self.socket_path} within {timeout_s:.0f} s")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self._log.close()
        self.socket_path.unlink(missing_ok=True)


def project_filter(project: str) -> str:
    return quote(json.dumps({"label": [f"{PROJECT_LABEL}={project}"]}))


class HealthTicker(threading.Thread):
    def __init__(self, api: DockerAPI, project: str, tick_s: float = 1.0) -> None:
        super().__init__(daemon=True, name="health-ticker")
        self.api, self.project, self.tick_s = api, project, tick_s
        self.stopping = threading.Event()
        self.runs = 0
        self._due: dict[str, float] = {}  # container id -> when its next check runs
        self._interval: dict[str, float | None] = {}  # container id -> its healthcheck interval

    def _interval_s(self, cid: str) -> float | None:
        if cid not in self._interval:
            check = (self.api.get_json(f"/containers/{cid}/json").get("Config") or {}).get("Healthcheck") or {}
            test = check.get("Test") or []
            # Docker's API gives nanoseconds; 0 is Docker's default of 30 s.
            self._interval[cid] = None if not test or test[0] == "NONE" else (check.get("Interval") or 30e9) / 1e9
        return self._interval[cid]

    def run(self) -> None:
        while not self.stopping.wait(self.tick_s):
            try:
                containers = self.api.get_json(f"/containers/json?filters={project_filter(self.project)}")
                for container in containers:
                    cid = container["Id"]
                    interval = self._interval_s(cid) if container.get("State") == "running" else None
                    if interval is None:
                        continue
                    now = time.monotonic()
                    due = self._due.setdefault(cid, now + interval)  # the first check after one interval
                    if now < due:
                        continue
                    self._due[cid] = now + interval
                    self.api.request("GET", f"/v4.0.0/libpod/containers/{cid}/healthcheck", timeout_s=30)
                    self.runs += 1
            except DockerAPIError:
                continue

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=15)


@dataclass(frozen=True)
class Probe:
    service: str
    phase: str
    at: float
    status: int  # 0: no answer within the timeout
    latency_s: float


@dataclass
class Prober:
    targets: dict[str, str]  # service -> base URL
    interval_s: float = 0.2
    timeout_s: float = 2.0
    phase: str = "setup"
    probes: list[Probe] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._loop, args=(s, u), daemon=True) for s, u in self.targets.items()]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _loop(self, service: str, base: str) -> None:
        parts = base.split("://", 1)[1]
        host, _, port = parts.partition(":")
        next_at = time.monotonic()
        while not self._stopping.is_set():
            start = time.monotonic()
            conn = http.client.HTTPConnection(host, int(port or 80), timeout=self.timeout_s)
            try:
                conn.request("GET", "/health")
                status = conn.getresponse().status
            except (OSError, http.client.HTTPException):
                status = 0
            finally:
                conn.close()
            with self._lock:
                self.probes.append(Probe(service, self.phase, start, status, time.monotonic() - start))
            next_at += self.interval_s
            self._stopping.wait(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(timeout=self.timeout_s + 5)

    def wait_for(self, phase: str, probes: int, timeout_s: float) -> None:
        """Until every target has `probes` probes in `phase` (the prober's own count)."""
        deadline = time.monotonic() + timeout_s
        while any(self.counts(phase, s)[0] < probes for s in self.targets):
            if time.monotonic() > deadline:
                raise RehearsalError(f"fewer than {probes} probes per target in {phase} after {timeout_s:.0f} s")
            self._stopping.wait(self.interval_s)

    def last(self, phase: str, service: str, n: int) -> list[int]:
        """Statuses of the service's last n probes in the phase."""
        with self._lock:
            return [p.status for p in self.probes if p.phase == phase and p.service == service][-n:]

    def counts(self, phase: str, service: str) -> tuple[int, int]:
        """(probes, misses) of one service in one phase."""
        with self._lock:
            mine = [p for p in self.probes if p.phase == phase and p.service == service]
        return len(mine), sum(1 for p in mine if p.status != 200)


@dataclass(frozen=True)
class Answer:
    phase: str
    status: int  # 0: no answer within the timeout
    upstream: str
    error: str


@dataclass
class Traffic:
    """Chat completions through the ingress, one at a time, every interval_s."""

    url: str
    model: str
    interval_s: float = 0.1
    timeout_s: float = 60.0
    phase: str = "setup"
    answers: list[Answer] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="traffic")
        self._body = json.dumps({"model": self.model, "max_tokens": 1,
                                 "messages": [{"role": "user", "content": "Say ok."}]}).encode()

    def start(self) -> None:
        self._thread.start()

    def _loop(self) -> None:
        host, _, port = self.url.split("://", 1)[1].split("/", 1)[0].partition(":")
        while not self._stopping.is_set():
            phase = self.phase
            conn = http.client.HTTPConnection(host, int(port or 80), timeout=self.timeout_s)
            try:
                conn.request("POST", "/v1/chat/completions", body=self._body, headers={"Content-Type": "application/json"})
                response = conn.getresponse()
                response.read()
                answer = Answer(phase, response.status, response.getheader("X-Upstream") or "",
                                response.getheader("X-Upstream-Errors") or "")
            except (OSError, http.client.HTTPException) as err:
                answer = Answer(phase, 0, "", str(err) or type(err).__name__)
            finally:
                conn.close()
            with self._lock:
                self.answers.append(answer)
            self._stopping.wait(self.interval_s)

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=self.timeout_s + 5)

    def summary(self, phase: str) -> tuple[int, list[Answer], dict[str, int]]:
        """(requests, the failed ones, answers per upstream) of one phase."""
        with self._lock:
            mine = [a for a in self.answers if a.phase == phase]
        upstreams: dict[str, int] = {}
        for a in mine:
            if a.status == 200:
                upstreams[a.upstream] = upstreams.get(a.upstream, 0) + 1
        return len(mine), [a for a in mine if a.status != 200], upstreams


def project_objects(api: DockerAPI, project: str) -> dict[str, list[str]]:
    """Ids of the containers, networks and volumes Compose labelled with the project."""
    flt = project_filter(project)
    containers = [c["Id"] for c in api.get_json(f"/containers/json?all=true&filters={flt}")]
    networks = [n["Id"] for n in api.get_json(f"/networks?filters={flt}")]
    volumes = [v["Name"] for v in (api.get_json(f"/volumes?filters={flt}").get("Volumes") or [])]
    return {"containers": containers, "networks": networks, "volumes": volumes}


def remove_objects(api: DockerAPI, objects: dict[str, list[str]]) -> None:
    for cid in objects["containers"]:
        api.request("DELETE", f"/containers/{cid}?force=true&v=true")
    for nid in objects["networks"]:
        api.request("DELETE", f"/networks/{nid}")
    for name in objects["volumes"]:
        api.request("DELETE", f"/volumes/{quote(name)}?force=true")


@dataclass(frozen=True)
class ManagerPass:
    revision: str
    services: tuple[str, ...]
    ok: bool
    output: str  # Compose's output (the rehearsal's files hold no secret)


class ManagerStandIn:
    """A compose manager that reconciles, with the reconcile API of deploy/rollout/manager.py.

    `run_pass(file, services)` is one reconcile pass (Compose's `up`; a test passes its own).
    A pause takes the pass lock, so it answers only when no pass is running, and no pass runs
    while any service is paused (a pass is `up` over the whole file). One-shot services (`restart: "no"`, the downloader) are not
    reconciled: re-running the rehearsal's downloader would rewrite the model files under an
    engine that is starting, and a one-shot job is not what undoes a roll.
    """

    def __init__(self, revision: str, file: Path, services: list[str], run_pass: Callable[[Path, list[str]], str],
                 interval_s: float = 10.0) -> None:
        self.revision, self.file, self.services = revision, file, list(services)
        self.run_pass, self.interval_s = run_pass, interval_s
        self.paused: dict[str, str] = {}  # service -> holder
        self.passes: list[ManagerPass] = []
        self._pass_lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="manager-standin")
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._server_thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="manager-api")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> None:
        self._server_thread.start()
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(timeout=600)
        self._server.shutdown()
        self._server.server_close()

    def reconcile_once(self) -> ManagerPass | None:
        with self._pass_lock:
            if self.paused:  # a pass is over the whole file: it would touch the paused service too
                return None
            services = tuple(self.services)
            try:
                output, ok = self.run_pass(self.file, list(services)), True
            except ComposeError as err:
                output, ok = str(err), False
            done = ManagerPass(self.revision, services, ok, output)
            self.passes.append(done)
            return done

    def _loop(self) -> None:
        while not self._stopping.wait(self.interval_s):
            self.reconcile_once()

    def state(self) -> dict:
        return {"paused": sorted(self.paused), "revision": self.revision, "passes": len(self.passes)}

    def _handler(self):
        manager = self

        class API(BaseHTTPRequestHandler):
            def _reply(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == STATE:
                    self._reply(200, manager.state())
                else:
                    self._reply(404, {"error": f"no {self.path}"})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                services = list(body.get("services") or [])
                unknown = sorted(set(services) - set(manager.services))
                if not services or unknown:
                    self._reply(400, {"error": f"services must be some of {manager.services}; unknown {unknown}"})
                    return
                if self.path == PAUSE:
                    with manager._pass_lock:  # the running pass ends first
                        for service in services:
                            manager.paused[service] = str(body.get("holder") or "")
                    self._reply(200, manager.state())
                elif self.path == RESUME:
                    with manager._pass_lock:
                        if body.get("file"):
                            manager.file, manager.revision = Path(body["file"]), str(body.get("revision") or body["file"])
                        for service in services:
                            manager.paused.pop(service, None)
                    self._reply(200, manager.state())
                else:
                    self._reply(404, {"error": f"no {self.path}"})

            def log_message(self, *args) -> None:
                pass

        return API


def compose_pass(compose: Callable[[Path], Compose], api: DockerAPI) -> Callable[[Path, list[str]], str]:
    """A reconcile pass as a manager runs it: `up --detach --remove-orphans` of its file.

    In two calls, because podman 4.3's Docker API reports a container's network by name where
    Compose compares the network's id, so a plain `up` recreates every container on every pass
    (measured: a second `up -d` of an unchanged one-service file said `Recreate`). So: `up
    --no-recreate` (create what is missing, start what stopped, remove orphans), then a forced
    recreate of each service whose container's config-hash label is not the file's `config
    --hash`, which is the decision Compose itself makes on a Docker host."""

    def run(file: Path, services: list[str]) -> str:
        c = compose(file)
        proc = c.run("up", "--detach", "--remove-orphans", "--no-deps", "--no-recreate", *services, timeout_s=600)
        lines = [(proc.stdout + proc.stderr).strip()]
        hashes = c.hashes()
        for service in services:
            ids = api.container_ids(c.project, service)
            running = api.config_hash(ids[0]) if ids else ""
            if ids and running != hashes.get(service):
                c.run("up", "--detach", "--no-deps", "--force-recreate", service, timeout_s=600)
                lines.append(f"recreated {service} (hash {running[:12]} -> {hashes.get(service, '')[:12]})")
        return "\n".join(lines)

    return run
