"""The rehearsal's stack: the long-context deployment on podman's Docker API, for the rehearsal tests.

Two rehearsals share it (deploy/rollout/README.md, "The rehearsal"):

* the light one (`rehearsal_light_test.py`, in `bazel test //...`): revisions A (r1 and r2 on
  v2) and B (the committed file: r2 on v3), both images loaded into the project's shared podman
  storage (the in-image suites load the same ones), no registry, no compose manager;
* the full one (`rehearsal_test.py`, the full tier): podman storage of its own, v3 only in a
  loopback registry (untagged from that storage first, so the rollout's pull really fetches
  it), revisions C (r2 broken) and D (r2's image a digest the registry does not have) as well,
  and the stand-in compose manager.

Revisions are Compose's canonical model of a file generated from the same tables, turned into
its CPU rehearsal by deploy/rollout/transform.py: A = the tables with r2's release set to
glm53_v2, B = the committed file, C = B with r2's server pointed at a model that does not
exist, D = B with r2's image missing from the registry. The engines run the committed
healthcheck. From the first deploy on, /health of both engines is probed every 200 ms and a
client sends chat completions through nginx -> proxy every 100 ms (the light one: every 500 ms;
each request crosses three Python servers, and at 100 ms they cost the light rehearsal 21 of
its 122 CPU seconds).

The log (stderr and rehearsal.log in the test outputs) shows each phase with probe and request
counts and container ids. Everything started (registry, podman service, containers, networks,
volumes) is removed by id at the end. The services keep their fixed container names and the
rehearsal networks their bridges, so two rehearsals on one machine (the light and the full one
in one `bazel test`, two worktrees' Bazel servers) would collide: each holds one machine-wide
lock file for its whole run, and a second one waits for it.
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
from typing import Iterator

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
MANAGER_INTERVAL_S = 10.0  # the stand-in manager's reconcile period
PROXY_TIMEOUT_S = 180.0  # one request: above the stand-ins' own 60 s per hop, so their 502 says why
LOCK_NAME = "rehearsal.lock"  # under the cache root (tools/podman/spec.default_cache_root)


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
    """`full`: the full rehearsal's stack (own storage, registry, revisions A-D, the manager);
    otherwise the light one's (shared storage, v3 loaded, revisions A and B, no manager)."""

    def __init__(self, full: bool) -> None:
        self.full = full
        self.tmp = Path(os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp()) / "rehearsal"
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.sock_dir = Path(tempfile.mkdtemp(prefix="glm53-rehearsal-", dir="/tmp"))
        self.compose_bin = (RUNFILES / os.environ["COMPOSE_BIN"]).absolute()
        self.project = f"rehearsal{os.getpid()}"
        # The full rehearsal keeps storage of its own: it removes v3 so that the rollout pulls it,
        # which in the shared storage would pull the image from under other tests' containers. The
        # light one removes nothing, so it uses the storage the in-image suites load the same images
        # into (no second copy of the 2 GiB CPU base on a fresh machine).
        self.config = podman_backend.PodmanConfig(default_cache_root() / ("podman-rehearsal" if full else "podman"))
        self.registry = LocalRegistry(self.tmp / "registry")
        self.service = PodmanService(self.config, self.sock_dir / "podman.sock", self.tmp / "podman-service.log",
                                     registries_conf=self.tmp / "registries.conf" if full else None)
        self.api = DockerAPI(self.service.docker_host)
        self.ticker: HealthTicker | None = None
        self.prober: Prober | None = None
        self.traffic: Traffic | None = None
        self.manager: ManagerStandIn | None = None
        self.reconciled: list[str] = []  # the services the stand-in manager keeps running
        self.files: dict[str, Path] = {}
        self.addresses: dict[str, str] = {}  # service -> its fixed address on the rehearsal network
        self.served_model = ""
        self.pulled_ref = ""  # r2's v3 image: in the loopback registry (full), in podman (light)
        self.images: dict[str, str] = {}  # name (v2, v3) -> podman image id
        self.port = _free_port()
        self.bake_s = 10.0 if full else 2.0  # the rollouts' --bake-s
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
        wait_until(lambda: len(self.manager.passes) > seen, 10 * MANAGER_INTERVAL_S + 300, f"a manager pass {what}")
        done = self.manager.passes[-1]
        log(f"  manager pass {len(self.manager.passes)} ({what}) on revision {done.revision}: ok={done.ok}; "
            f"paused {sorted(self.manager.paused)}")
        for line in done.output.splitlines():
            log(f"    manager| {line}")
        assert done.ok, f"the manager's pass failed: {done.output}"

    def lock(self) -> None:
        """Waits until no other rehearsal on this machine runs (their container names are the same)."""
        root = default_cache_root()
        root.mkdir(parents=True, exist_ok=True)
        self._lock = open(root / LOCK_NAME, "w")
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
        if self.full:
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
        missing = "sha256:" + hashlib.sha256(b"a release the registry does not have").hexdigest()
        if self.full:
            # v3 only in the registry: phase 3's rollout must pull it before it stops r2.
            served = _push(self.registry, os.environ["REHEARSAL_IMAGE_V3"], "nearai/sglang-glm53", self.tmp)
            assert served == records["v3"]["digest"], (
                f"recipes/releases/glm53_v3.json records {records['v3']['digest']} but the registry serves {served}")
            self.pulled_ref = f"{self.registry.address}/nearai/sglang-glm53@{served}"
            engine_images[f"{records['v3']['repository']}@{served}"] = self.pulled_ref
            self.images["v3"] = _image(os.environ["REHEARSAL_IMAGE_V3"]).config_digest.split(":", 1)[1]
            engine_images[f"{records['v3']['repository']}@{missing}"] = f"{self.registry.address}/nearai/sglang-glm53@{missing}"
            self._forget(self.pulled_ref)
            log(f"image v3: {self.pulled_ref} (in the registry only, not in podman)")
        else:
            # v3 already in podman: the rollout's pull finds it present (`pull --policy missing`).
            digest, self.pulled_ref, self.images["v3"] = _load_image(self.config, os.environ["REHEARSAL_IMAGE_V3"])
            assert digest == records["v3"]["digest"], (
                f"recipes/releases/glm53_v3.json records {records['v3']['digest']} but the image built here is {digest}")
            engine_images[f"{records['v3']['repository']}@{digest}"] = self.pulled_ref
            log(f"image v3: {self.pulled_ref} (id {self.images['v3'][:12]}), loaded into podman")
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
        texts = {"a": _revision_a(self.tmp), "b": committed}
        broken = {"a": frozenset(), "b": frozenset()}
        if self.full:
            texts.update(c=committed, d=committed.replace(v3_image, f"image: {records['v3']['repository']}@{missing}\n"))
            broken.update(c=frozenset({R2}), d=frozenset())
        for revision, text in texts.items():
            source = self.tmp / f"{revision}.source.yaml"
            source.write_text(text)
            model = Compose(binary=self.compose_bin, file=source, project=self.project, profiles=("*",)).model()
            rehearsal = rehearsal_model(model, engine_images, support_ref, str(server_dir), str(support_dir), subnet,
                                        self.port, broken[revision])
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
        the storage is the full rehearsals' own, one at a time), so the rollout's pull must fetch
        it; never forced (a container using it keeps it)."""
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
        self.traffic = Traffic(f"http://127.0.0.1:{self.port}", self.served_model, interval_s=0.1 if self.full else 0.5)
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
        manager = ["--manager-url", self.manager.url] if self.manager else ["--no-manager"]
        return [sys.executable, "-m", "deploy.rollout.cli", "--compose-bin", str(self.compose_bin), "apply",
                "--from", str(self.files[source]), "--to", str(self.files[target]), "--services", R2,
                "--project-name", self.project, "--rehearsal", "--journal", str(self.tmp / journal),
                "--drain-via", PROXY, "--probe-interval-s", "0.5", "--lock-dir", str(self.tmp / "locks"),
                "--verify-url", f"http://127.0.0.1:{self.port}/v1/chat/completions",
                "--verify-timeout-s", str(PROXY_TIMEOUT_S), "--bake-s", f"{self.bake_s:g}"] + manager

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
                start = time.monotonic()
                # --timeout 1: the teardown checks nothing about a stop (the rollouts' stops use the
                # committed grace), and the engines' graceful stop waits on sglang's 5 s watchdog.
                self.compose("a").run("down", "--volumes", "--remove-orphans", "--timeout", "1", timeout_s=300, check=False)
                log(f"teardown: `down --volumes` took {time.monotonic() - start:.0f} s")
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


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")  # Bazel's timeout sends SIGTERM: tear down first


def running(full: bool) -> Iterator[Stack]:
    """The body of a module-scoped `stack` fixture: set up, yield, always torn down."""
    signal.signal(signal.SIGTERM, _interrupt)
    s = Stack(full)
    try:
        s.setup()
        yield s
    finally:
        s.teardown()


def through_proxy(port: int, requests: int, phase: str) -> list[tuple[int, str]]:
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


def rollout_failure(phase: str, proc: subprocess.CompletedProcess) -> str:
    """The rollout tool's own account of a failure: its FAILED lines, else its last lines."""
    lines = (proc.stdout + proc.stderr).splitlines()
    failed = [line for line in lines if "FAILED" in line] or lines[-10:]
    return f"{phase}: rollout exited {proc.returncode}: " + " | ".join(failed)


def changed(before: dict, after: dict) -> set[str]:
    return {s for s in before if before[s]["id"] != after.get(s, {}).get("id")}


def assert_served_through(stack: Stack, phase: str, counts: dict) -> None:
    """r1 missed no probe and the client saw no failed request in the phase."""
    sent, failed = stack.log_traffic(phase)
    assert counts[R1][0] > 0 and counts[R1][1] == 0, f"{phase}: r1 missed probes: {counts[R1]}"
    assert sent > 0 and not failed, f"{phase}: {len(failed)} of {sent} client requests failed: {failed[:5]}"


def wait_until(predicate, timeout_s: float, what: str, poll_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    pytest.fail(f"{what}: not within {timeout_s:.0f} s")


def deploy_all_healthy(stack: Stack) -> dict[str, dict]:
    """Phase 1 of both rehearsals: `up --wait` of A, every engine healthy on v2 and answering
    through nginx -> proxy; then the probes and the client start. Returns the containers."""
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
    answers = through_proxy(stack.port, 4, "phase 1")
    log(f"  through the proxy path: {answers}")
    assert all(status == 200 for status, _ in answers), f"phase 1: through the proxy path: {answers}"
    counts = stack.log_probes("deploy")
    assert all(total > 0 and missed == 0 for total, missed in counts.values()), counts
    return containers
