"""The rollout rehearsed on this machine: the long-context deployment on podman, four phases.

Revisions (each Compose's canonical model of a file generated from the same tables, turned
into its CPU rehearsal by deploy/rollout/transform.py): A = r1 and r2 on v2 (the tables with
r2's release set to glm53_v2; the image loaded into podman), B = the committed file (r2 on v3,
pulled from a loopback registry), C = B with r2 broken (its server never starts), D = B with
r2's image a digest the registry does not have. The engines run the committed healthcheck.
/health of both engines is probed every 200 ms, and a client sends chat completions through
nginx -> proxy every 100 ms, from the first deploy to the end.

1. deploy A with `up --wait`: every engine healthy;
2. `rollout apply` A -> D: the pull fails before anything stops; r2 keeps running A;
3. `rollout apply` A -> B: pull, drain, stop (5 min grace), start, check, restore; a second
   apply of the project meanwhile is refused naming the first; the first is killed (SIGKILL,
   with its Compose child) once r2's old container is gone, and `apply --resume` finishes it;
4. `rollout apply` B -> C: the gate fails, the tool rolls r2 back to B on its own.

Through phases 2-4 the client sees no failed request and r1 misses no probe. The log (stderr
and rehearsal.log in the test outputs) shows each phase with probe and request counts and
container ids. Everything started (registry, podman service, containers, networks, volumes)
is removed by id at the end. The services keep their fixed container names, so two
rehearsals on one machine (two worktrees' Bazel servers) would collide on them: each holds a
lock file beside podman's storage for its whole run, and a second one waits for it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import http.client
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from deploy.compose_gen.cli import main as generate_main
from tools.oci.materialize import materialize_image
from tools.oci.ocilayout import parse_blob_args, read_layout
from tools.oci.testing.local_registry import LocalRegistry
from tools.podman import podman_backend
from tools.podman.spec import default_cache_root
from deploy.rollout.compose_cli import Compose
from deploy.rollout.docker_api import DockerAPI
from deploy.rollout.rehearsal import (HealthTicker, ManagerStandIn, PodmanService, Prober, Traffic, compose_pass,
                                      project_filter, project_objects, remove_objects)
from deploy.rollout.transform import PROXY, rehearsal_model

LONG = "GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"
R1, R2 = "model-sg-glm53-w4afp8-tp4-r1", "model-sg-glm53-w4afp8-tp4-r2"
RUNFILES = Path(os.environ.get("TEST_SRCDIR", ".")) / os.environ.get("TEST_WORKSPACE", "")
SERVICE_LABEL = "com.docker.compose.service"


def log(line: str) -> None:
    print(f"rehearsal: {line}", file=sys.__stderr__, flush=True)
    out = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
    if out:
        with open(Path(out) / "rehearsal.log", "a") as handle:
            handle.write(line + "\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _free_subnet(pid: int) -> str:
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    for i in range(200):
        candidate = f"10.{200 + (pid + i) % 50}.{(pid // 50 + i) % 250}."
        if candidate not in routes:
            return candidate + "0/24"
    raise RuntimeError("no free 10.x.y.0/24 for the rehearsal network")


def _revision_a(tmp: Path) -> str:
    """The long-context file as the generator makes it with r2 on glm53_v2."""
    tables = RUNFILES / "generators" / "tables"
    lines = (tables / "glm53_tp4_w4afp8_long_context.toml").read_text().splitlines(keepends=True)
    release_lines = [i for i, line in enumerate(lines) if line.startswith("release = ")]
    assert len(release_lines) == 2, "expected one release line per replica (r1, r2)"
    lines[release_lines[1]] = 'release = "glm53_v2"\n'
    table = tmp / "long_context_r2_v2.toml"
    table.write_text("".join(lines))
    records = [f"glm53_v{n}={RUNFILES / 'recipes' / 'releases' / f'glm53_v{n}.json'}" for n in (1, 2, 3)]
    out = tmp / "a.generated.yaml"
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert generate_main([a for r in records for a in ("--release", r)]
                             + ["--common", str(tables / "common.toml"), "--deployment", str(table), "--print", LONG]) == 0
    out.write_text(buffer.getvalue())
    return out.read_text()


def _image(files_json: str):
    files = json.loads((RUNFILES / files_json).read_text())
    return read_layout(RUNFILES / files["layout"], parse_blob_args(files["blobs"]), require_blobs=True)  # blobs: relative to RUNFILES (cwd)


def _push(registry: LocalRegistry, files_json: str, path: str, tmp: Path) -> str:
    """Copies an image_files target into the registry as is; returns the digest it serves."""
    image = _image(files_json)
    view = tmp / f"push-{image.manifest_digest.split(':', 1)[1][:16]}"
    shutil.rmtree(view, ignore_errors=True)
    materialize_image(image, view, "symlink")
    try:
        # --preserve-digests: byte for byte (skopeo would otherwise compress the layers).
        return registry.seed(f"oci:{view}", path, "rehearsal", "--preserve-digests")
    finally:
        shutil.rmtree(view, ignore_errors=True)


def _load_image(config: podman_backend.PodmanConfig, files_json: str) -> tuple[str, str, str]:
    """(manifest digest, local reference, image id) of an image_files target, pulled into podman."""
    image = _image(files_json)
    image_id = podman_backend.pull(config, image)
    ref = f"{podman_backend.IMAGE_NAME}:{image.manifest_digest.split(':', 1)[1][:16]}"
    return image.manifest_digest, ref, image_id


class Stack:
    def __init__(self) -> None:
        self.tmp = Path(os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp()) / "rehearsal"
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.sock_dir = Path(tempfile.mkdtemp(prefix="glm53-rehearsal-", dir="/tmp"))
        self.compose_bin = (RUNFILES / os.environ["COMPOSE_BIN"]).absolute()
        self.project = f"rehearsal{os.getpid()}"
        # Storage of its own: the rehearsal removes v3 so that the rollout pulls it, which in the
        # shared storage would pull the image from under other tests' containers.
        self.config = podman_backend.PodmanConfig(default_cache_root() / "podman-rehearsal")
        self.registry = LocalRegistry(self.tmp / "registry")
        self.service = PodmanService(self.config, self.sock_dir / "podman.sock", self.tmp / "podman-service.log",
                                     registries_conf=self.tmp / "registries.conf")
        self.api = DockerAPI(self.service.docker_host)
        self.ticker: HealthTicker | None = None
        self.prober: Prober | None = None
        self.traffic: Traffic | None = None
        self.manager: ManagerStandIn | None = None
        self.reconciled: list[str] = []  # the services the stand-in manager keeps running
        self.files: dict[str, Path] = {}
        self.pulled_ref = ""  # r2's v3 image in the loopback registry
        self.images: dict[str, str] = {}  # name (v2, v3) -> podman image id
        self.port = _free_port()
        self.unfinished: str | None = None  # the phase that started and did not pass
        self._lock = None  # the open rehearsal lock file while this rehearsal runs

    def begin(self, phase: str) -> None:
        if self.unfinished:
            pytest.fail(f"not run: {self.unfinished} did not pass, so the stack is not in the state this phase starts from")
        self.unfinished = phase
        log(phase)

    def passed(self) -> None:
        log(f"{self.unfinished}: PASSED")
        self.unfinished = None

    def compose(self, revision: str) -> Compose:
        return self.compose_file(self.files[revision])

    def compose_file(self, file: Path) -> Compose:
        return Compose(binary=self.compose_bin, file=file, project=self.project, docker_host=self.service.docker_host)

    def start_manager(self) -> None:
        """The host's compose manager, reconciling revision A as deployed."""
        self.manager = ManagerStandIn("a", self.files["a"], self.reconciled, compose_pass(self.compose_file, self.api),
                                      interval_s=MANAGER_INTERVAL_S)
        self.manager.start()
        log(f"stand-in compose manager on {self.manager.url}: `up --detach --remove-orphans --no-deps` of "
            f"{', '.join(self.reconciled)} every {MANAGER_INTERVAL_S:g} s")

    def manager_pass(self, what: str) -> None:
        """Waits for the manager's next pass (a new one, so it ran on what is deployed now)."""
        seen = len(self.manager.passes)
        _wait(lambda: len(self.manager.passes) > seen, 10 * MANAGER_INTERVAL_S + 300, f"a manager pass {what}")
        done = self.manager.passes[-1]
        log(f"  manager pass {len(self.manager.passes)} ({what}) on revision {done.revision}: ok={done.ok}; "
            f"paused {sorted(self.manager.paused)}")
        for line in done.output.splitlines():
            log(f"    manager| {line}")
        assert done.ok, f"the manager's pass failed: {done.output}"

    def lock(self) -> None:
        """Waits until no other rehearsal on this machine runs (their container names are the same)."""
        self.config.root.mkdir(parents=True, exist_ok=True)
        self._lock = open(self.config.root / "rehearsal.lock", "w")
        start = time.monotonic()
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another rehearsal holds {self._lock.name}; waiting for it")
            fcntl.flock(self._lock, fcntl.LOCK_EX)
        log(f"rehearsal lock {self._lock.name} taken after {time.monotonic() - start:.0f} s")

    def setup(self) -> None:
        self.lock()
        start = time.monotonic()
        os.chdir(RUNFILES)
        self.registry.start()
        # The loopback registry speaks http; podman pulls from it only when told so.
        (self.tmp / "registries.conf").write_text(f'[[registry]]\nlocation = "{self.registry.address}"\ninsecure = true\n')
        log(f"loopback registry {self.registry.address} (pid {self.registry.process.pid})")
        self.service.start()
        log(f"podman system service on {self.service.socket_path} (pid {self.service.proc.pid}),"
            f" storage {self.config.root}")
        records = {n: json.loads((RUNFILES / "recipes" / "releases" / f"glm53_{n}.json").read_text()) for n in ("v2", "v3")}
        engine_images = {}
        digest, ref, image_id = _load_image(self.config, os.environ["REHEARSAL_IMAGE_V2"])
        assert digest == records["v2"]["digest"], (
            f"recipes/releases/glm53_v2.json records {records['v2']['digest']} but the image built here is "
            f"{digest}: regenerate the record (tools/release/README.md)")
        engine_images[f"{records['v2']['repository']}@{digest}"] = ref
        self.images["v2"] = image_id
        log(f"image v2: {ref} (id {image_id[:12]}, manifest {digest[:19]}), loaded into podman")
        # v3 only in the registry: phase 3's rollout must pull it before it stops r2.
        served = _push(self.registry, os.environ["REHEARSAL_IMAGE_V3"], "nearai/sglang-glm53", self.tmp)
        assert served == records["v3"]["digest"], (
            f"recipes/releases/glm53_v3.json records {records['v3']['digest']} but the registry serves {served}")
        self.pulled_ref = f"{self.registry.address}/nearai/sglang-glm53@{served}"
        engine_images[f"{records['v3']['repository']}@{served}"] = self.pulled_ref
        self.images["v3"] = _image(os.environ["REHEARSAL_IMAGE_V3"]).config_digest.split(":", 1)[1]
        missing = "sha256:" + hashlib.sha256(b"a release the registry does not have").hexdigest()
        engine_images[f"{records['v3']['repository']}@{missing}"] = f"{self.registry.address}/nearai/sglang-glm53@{missing}"
        self._forget(self.pulled_ref)
        log(f"image v3: {self.pulled_ref} (in the registry only, not in podman)")
        _, support_ref, support_id = _load_image(self.config, os.environ["REHEARSAL_IMAGE_BASE"])
        log(f"stand-in image (project CPU base): {support_ref} (id {support_id[:12]})")
        server_dir, support_dir = self.tmp / "sglang_server", self.tmp / "support"
        for src, dest in ((RUNFILES / "tools" / "sglang_server" / "in_container", server_dir),
                          (RUNFILES / "deploy" / "rollout" / "in_container", support_dir)):
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(src, dest, symlinks=False, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        subnet = _free_subnet(os.getpid())
        committed = (RUNFILES / "compose" / LONG).read_text()
        v3_image = f"image: {records['v3']['repository']}@{records['v3']['digest']}\n"
        assert committed.count(v3_image) == 1, f"expected one engine on v3 ({v3_image.strip()})"
        texts = {"a": _revision_a(self.tmp), "b": committed, "c": committed,
                 "d": committed.replace(v3_image, f"image: {records['v3']['repository']}@{missing}\n")}
        for revision, broken in (("a", frozenset()), ("b", frozenset()), ("c", frozenset({R2})), ("d", frozenset())):
            source = self.tmp / f"{revision}.source.yaml"
            source.write_text(texts[revision])
            model = Compose(binary=self.compose_bin, file=source, project=self.project, profiles=("*",)).model()
            rehearsal = rehearsal_model(model, engine_images, support_ref, str(server_dir), str(support_dir), subnet,
                                        self.port, broken)
            self.files[revision] = self.tmp / f"rev-{revision}.yaml"
            self.files[revision].write_text(json.dumps(rehearsal.model, indent=1, sort_keys=True) + "\n")
            self.addresses = rehearsal.addresses
            self.reconciled = sorted(n for n, svc in rehearsal.model["services"].items()
                                     if svc.get("restart", "no") != "no" and not svc.get("profiles"))
            argv = model["services"][R1]["command"]
            self.served_model = argv[argv.index("--served-model-name") + 1]
            log(f"revision {revision}: {self.files[revision].name}; dropped {', '.join(rehearsal.dropped)}")
        self.ticker = HealthTicker(self.api, self.project)
        self.ticker.start()
        log(f"setup done in {time.monotonic() - start:.0f} s (network {subnet}, ingress 127.0.0.1:{self.port})")

    def _forget(self, reference: str) -> None:
        """Untags every name of the image the reference resolves to (an earlier rehearsal's pull:
        the storage is the rehearsals' own, one at a time), so the rollout's pull must fetch it;
        never forced (a container using it keeps it)."""
        if not self.api.image_present(reference):
            return
        info = self.api.get_json(f"/images/{reference}/json")
        for name in info.get("RepoTags") or []:
            self.api.request("DELETE", f"/images/{name}")
        self.api.request("DELETE", f"/images/{info['Id']}")
        assert not self.api.image_present(reference), (
            f"{reference} ({info['Id'][:19]}) stays in podman's storage (a container uses it?): the pull would not be tested")

    def containers(self) -> dict[str, dict]:
        """service -> {id, image} of the project's containers, from the Docker API."""
        out = {}
        for c in self.api.get_json(f"/containers/json?all=true&filters={project_filter(self.project)}"):
            out[c["Labels"][SERVICE_LABEL]] = {"id": c["Id"], "image": c["ImageID"].removeprefix("sha256:"), "state": c["State"]}
        return out

    def log_containers(self, title: str, containers: dict[str, dict]) -> None:
        names = {v: k for k, v in self.images.items()}
        for service in sorted(containers):
            c = containers[service]
            log(f"  {title} {service:<32} {c['id'][:12]} {c['state']:<8} {names.get(c['image'], c['image'][:12])}")

    def start_probes(self) -> None:
        self.prober = Prober({s: f"http://{self.addresses[s]}:8000" for s in (R1, R2)})
        self.prober.start()
        self.traffic = Traffic(f"http://127.0.0.1:{self.port}", self.served_model)
        self.traffic.start()

    def set_phase(self, phase: str) -> None:
        self.prober.phase = self.traffic.phase = phase

    def log_traffic(self, phase: str) -> tuple[int, list]:
        sent, failed, upstreams = self.traffic.summary(phase)
        log(f"  client {phase}: {sent} chat completions through nginx -> proxy, {len(failed)} failed, served by {upstreams}")
        for answer in failed[:10]:
            log(f"    failed: HTTP {answer.status} {answer.error}")
        return sent, failed

    def proxy_backends(self) -> dict[str, bool]:
        """backend -> draining, from the proxy stand-in's drain API."""
        conn = http.client.HTTPConnection(self.addresses[PROXY], 8000, timeout=10)
        try:
            conn.request("GET", "/_rollout/backends")
            body = json.loads(conn.getresponse().read())
        finally:
            conn.close()
        return {b["host"]: b["draining"] for b in body["backends"]}

    def log_probes(self, phase: str) -> dict[str, tuple[int, int]]:
        counts = {s: self.prober.counts(phase, s) for s in (R1, R2)}
        for service, (total, missed) in counts.items():
            log(f"  probes {phase} {service}: {total} sent, {total - missed} answered 200, {missed} missed")
        return counts

    def rollout_argv(self, source: str, target: str, journal: str) -> list[str]:
        """The apply an operator runs, with the defaults for every bound but the short bake."""
        return [sys.executable, "-m", "deploy.rollout.cli", "--compose-bin", str(self.compose_bin), "apply",
                "--from", str(self.files[source]), "--to", str(self.files[target]), "--services", R2,
                "--project-name", self.project, "--rehearsal", "--journal", str(self.tmp / journal),
                "--drain-via", PROXY, "--probe-interval-s", "0.5", "--lock-dir", str(self.tmp / "locks"),
                "--verify-url", f"http://127.0.0.1:{self.port}/v1/chat/completions",
                "--verify-timeout-s", str(PROXY_TIMEOUT_S), "--bake-s", "10", "--manager-url", self.manager.url]

    def env(self) -> dict[str, str]:
        # Unbuffered: a killed apply's log must hold every line it printed.
        return {**os.environ, "DOCKER_HOST": self.service.docker_host, "PYTHONPATH": os.pathsep.join(sys.path),
                "PYTHONUNBUFFERED": "1"}

    def run_tool(self, argv: list[str], title: str) -> subprocess.CompletedProcess:
        start = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, env=self.env(), timeout=5400)
        for line in (proc.stdout + proc.stderr).splitlines():
            log(f"  | {line}")
        log(f"  {title}: exit {proc.returncode} after {time.monotonic() - start:.0f} s")
        return proc

    def rollout(self, source: str, target: str, journal: str) -> subprocess.CompletedProcess:
        return self.run_tool(self.rollout_argv(source, target, journal), f"rollout {source} -> {target}")

    def teardown(self) -> None:
        for part in (self.manager, self.traffic, self.prober, self.ticker):
            if part is not None:
                part.stop()
        left: dict[str, list[str]] = {}
        try:
            if self.service.proc is not None and self.files:
                self.compose("a").run("down", "--volumes", "--remove-orphans", "--timeout", "10", timeout_s=300, check=False)
                left = project_objects(self.api, self.project)
                if any(left.values()):
                    log(f"teardown: removing what `down` left, by id: {left}")
                    remove_objects(self.api, left)
                left = project_objects(self.api, self.project)
                log(f"teardown: project objects left: {sum(len(v) for v in left.values())}")
        finally:
            self.service.stop()
            self.registry.stop()
            shutil.rmtree(self.sock_dir, ignore_errors=True)
            log(f"teardown: podman system service stopped (pid {self.service.proc.pid if self.service.proc else '-'})")
            if self._lock is not None:
                self._lock.close()  # releases the rehearsal lock
        assert not any(left.values()), f"the rehearsal left {left}"


MANAGER_INTERVAL_S = 10.0  # the stand-in manager's reconcile period
PROXY_TIMEOUT_S = 180.0  # one request: above the stand-ins' own 60 s per hop, so their 502 says why


def _through_proxy(port: int, requests: int, phase: str) -> list[tuple[int, str]]:
    answers = []
    for i in range(requests):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=PROXY_TIMEOUT_S)
        start = time.monotonic()
        try:
            conn.request("GET", "/v1/models")
            response = conn.getresponse()
            response.read()
        except OSError as err:
            pytest.fail(f"{phase}: request {i + 1} through the proxy path (127.0.0.1:{port}) got no answer after "
                        f"{time.monotonic() - start:.0f} s: {err or type(err).__name__}; earlier answers {answers}")
        finally:
            conn.close()
        answers.append((response.status, response.getheader("X-Upstream") or response.getheader("X-Upstream-Errors") or ""))
    return answers


def _rollout_failure(phase: str, proc: subprocess.CompletedProcess) -> str:
    """The rollout tool's own account of a failure: its FAILED lines, else its last lines."""
    lines = (proc.stdout + proc.stderr).splitlines()
    failed = [line for line in lines if "FAILED" in line] or lines[-10:]
    return f"{phase}: rollout exited {proc.returncode}: " + " | ".join(failed)


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # Bazel's timeout sends SIGTERM: tear down first


@pytest.fixture(scope="module")
def stack():
    signal.signal(signal.SIGTERM, _interrupt)
    s = Stack()
    try:
        s.setup()
        yield s
    finally:
        s.teardown()


def _changed(before: dict, after: dict) -> set[str]:
    return {s for s in before if before[s]["id"] != after.get(s, {}).get("id")}


def _assert_served_through(stack: Stack, phase: str, counts: dict) -> None:
    """r1 missed no probe and the client saw no failed request in the phase."""
    sent, failed = stack.log_traffic(phase)
    assert counts[R1][0] > 0 and counts[R1][1] == 0, f"{phase}: r1 missed probes: {counts[R1]}"
    assert sent > 0 and not failed, f"{phase}: {len(failed)} of {sent} client requests failed: {failed[:5]}"


def test_1_deploy_all_healthy(stack: Stack) -> None:
    stack.begin("phase 1: deploy A (r1=v2, r2=v2) with `up --detach --wait`")
    start = time.monotonic()
    stack.compose("a").run("up", "--detach", "--wait", "--wait-timeout", "3600", timeout_s=3700)
    log(f"  up --wait returned after {time.monotonic() - start:.0f} s")
    stack.start_probes()
    stack.set_phase("deploy")
    stack.prober.wait_for("deploy", 25, timeout_s=60)  # 5 s of probes on the fresh deployment
    containers = stack.containers()
    stack.log_containers("deployed", containers)
    for service in (R1, R2):
        state = stack.api.state(containers[service]["id"])
        assert state.running and state.health == "healthy", f"{service}: running={state.running} health={state.health}"
        assert containers[service]["image"] == stack.images["v2"]
    answers = _through_proxy(stack.port, 4, "phase 1")
    log(f"  through the proxy path: {answers}")
    assert all(status == 200 for status, _ in answers), f"phase 1: through the proxy path: {answers}"
    counts = stack.log_probes("deploy")
    assert all(total > 0 and missed == 0 for total, missed in counts.values()), counts
    stack.start_manager()
    stack.manager_pass("on the deployment")
    assert not _changed(containers, stack.containers()), "the manager's pass over what it deployed replaced a container"
    stack.passed()


def test_2_failing_pull_stops_nothing(stack: Stack) -> None:
    stack.begin("phase 2: rollout apply A -> D for r2 (r2's image is not in the registry)")
    before = stack.containers()
    stack.set_phase("pull-fails")
    proc = stack.rollout("a", "d", "journal-pull.json")
    after = stack.containers()
    counts = stack.log_probes("pull-fails")
    assert proc.returncode == 1, _rollout_failure("phase 2 (expected exit 1)", proc)
    out = proc.stdout
    assert f"rollout: FAILED: {R2}: pull failed" in out and "nothing was stopped" in out, out
    assert f"{R2}: stopping" not in out and f"{R2}: drained" not in out, "the rollout touched r2 before its image was there"
    assert not _changed(before, after) and after[R2]["image"] == stack.images["v2"]
    assert counts[R2][1] == 0, f"r2 missed probes while its pull failed: {counts[R2]}"
    assert json.loads((stack.tmp / "journal-pull.json").read_text())["state"] == "failed"
    _assert_served_through(stack, "pull-fails", counts)
    stack.passed()


def _wait(predicate, timeout_s: float, what: str, poll_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    pytest.fail(f"{what}: not within {timeout_s:.0f} s")


def test_3_roll_r2_to_v3_killed_and_resumed(stack: Stack) -> None:
    stack.begin("phase 3: rollout apply A -> B for r2 (r2 to v3, pulled), a second apply refused, "
                "the first killed and resumed")
    before = stack.containers()
    stack.log_containers("before", before)
    stack.set_phase("roll-v3")
    journal = stack.tmp / "journal-v3.json"
    first_log = (stack.tmp / "apply-1.log").open("w")
    first = subprocess.Popen(stack.rollout_argv("a", "b", journal.name), env=stack.env(), stdout=first_log,
                             stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        _wait(lambda: journal.exists() or first.poll() is not None, 600, "the first apply writes its journal")
        assert first.poll() is None, f"the first apply exited {first.returncode} early: {(stack.tmp / 'apply-1.log').read_text()}"
        second = stack.rollout("a", "b", "journal-second.json")
        assert second.returncode == 1, _rollout_failure("the second apply (expected refused)", second)
        assert f"another rollout of project {stack.project} holds" in second.stderr, second.stderr
        assert f"pid {first.pid} (`rollout apply`, journal {journal}" in second.stderr, second.stderr
        assert not (stack.tmp / "journal-second.json").exists()
        _wait(lambda: before[R2]["id"] not in {c["id"] for c in stack.containers().values()} or first.poll() is not None,
              1200, "r2's old container removed by the first apply")
        assert first.poll() is None, f"the first apply exited {first.returncode} before r2's stop"
        os.killpg(first.pid, signal.SIGKILL)  # the apply and its Compose child, as a lost host session would
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait(timeout=30)
        first_log.close()
    for line in (stack.tmp / "apply-1.log").read_text().splitlines():
        log(f"  1| {line}")
    state = json.loads(journal.read_text())
    log(f"  killed the first apply (pid {first.pid}) at step {state['entries'][R2]['step']!r}; proxy backends "
        f"draining: {stack.proxy_backends()}; manager paused {sorted(stack.manager.paused)}")
    assert sorted(stack.manager.paused) == [R2], "the killed apply's pause of the manager did not hold"
    proc = stack.run_tool([sys.executable, "-m", "deploy.rollout.cli", "--compose-bin", str(stack.compose_bin), "apply",
                           "--resume", "--journal", str(journal), "--lock-dir", str(stack.tmp / "locks")],
                          "rollout apply --resume")
    after = stack.containers()
    stack.log_containers("after ", after)
    counts = stack.log_probes("roll-v3")
    _assert_served_through(stack, "roll-v3", counts)
    assert state["state"] == "applying" and state["entries"][R2]["drained"], state["entries"]
    assert proc.returncode == 0, _rollout_failure(f"phase 3 resume ({R2} to v3)", proc)
    first_out = (stack.tmp / "apply-1.log").read_text()
    assert first_out.index(f"{R2}: image {stack.pulled_ref} present") < first_out.index(f"{R2}: drained from {PROXY}") \
        < first_out.index(f"{R2}: stopping"), "pull, drain, stop: not in that order"
    assert "(grace 300 s)" in first_out, "the stop did not use the committed 5 min grace period"
    assert f"{R2}: glm53-perception-check passed against http://{R2}:8000" in proc.stdout, proc.stdout
    assert _changed(before, after) == {R2} and set(after) == set(before)
    assert after[R2]["image"] == stack.images["v3"]
    assert stack.api.image_present(stack.pulled_ref), "v3 is not in podman under the registry's reference"
    assert stack.proxy_backends() == {R1: False, R2: False}, "r2 is not back in the proxy's rotation"
    state = stack.api.state(after[R2]["id"])
    assert state.running and state.health == "healthy"
    answers = _through_proxy(stack.port, 4, "phase 3")
    log(f"  through the proxy path: {answers}")
    assert all(status == 200 for status, _ in answers) and any(up == R2 for _, up in answers), (
        f"phase 3: through the proxy path, every answer 200 and one from {R2}: {answers}")
    assert f"{R2}: served a chat completion on its own address" in proc.stdout, proc.stdout
    assert f"served by {R2}: {R2}'s sglang:num_requests_total" in proc.stdout, proc.stdout
    assert f"the compose manager reconciles {R2} again, against {stack.files['b']}" in proc.stdout, proc.stdout
    assert not stack.manager.paused and stack.manager.revision == str(stack.files["b"])
    stack.manager_pass("after the roll")
    assert not _changed(after, stack.containers()), "the manager's pass after the roll replaced a container"
    stack.passed()


def test_4_broken_release_rolls_back(stack: Stack) -> None:
    stack.begin("phase 4: rollout apply B -> C for r2 (r2 to a release that never turns healthy)")
    before = stack.containers()
    stack.log_containers("before", before)
    stack.set_phase("roll-broken")
    proc = stack.rollout("b", "c", "journal-broken.json")
    after = stack.containers()
    stack.log_containers("after ", after)
    counts = stack.log_probes("roll-broken")
    assert proc.returncode == 1, _rollout_failure(f"phase 4 ({R2} to a broken release, expected exit 1)", proc)
    assert "rollout: FAILED:" in proc.stdout and f"{R2}: rolled back to" in proc.stdout, proc.stdout
    assert _changed(before, after) == {R2}
    assert after[R2]["image"] == stack.images["v3"], "r2 is not back on the previous release"
    state = stack.api.state(after[R2]["id"])
    assert state.running and state.health == "healthy"
    stack.prober.wait_for("roll-broken", counts[R2][0] + 10, timeout_s=60)
    assert stack.prober.last("roll-broken", R2, 10) == [200] * 10, "r2 is not answering /health after the rollback"
    assert stack.proxy_backends() == {R1: False, R2: False}, "r2 is not back in the proxy's rotation"
    journal = json.loads((stack.tmp / "journal-broken.json").read_text())
    assert journal["state"] == "rolled-back" and journal["entries"][R2]["step"] == "rolled-back"
    _assert_served_through(stack, "roll-broken", counts)
    assert f"the compose manager reconciles {R2} again, against {stack.files['b']}" in proc.stdout, proc.stdout
    stack.manager_pass("after the rollback")
    assert not _changed(after, stack.containers()), "the manager's pass after the rollback replaced a container"
    stack.set_phase("end")
    stack.passed()
