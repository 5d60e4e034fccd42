"""The rollout planner, gate seam, journal and automatic rollback, deterministically.

Planner cases run the pinned Compose binary on copies of the committed long-context file with
one drift each; the apply/rollback cases drive `Rollout` with a recording fake Compose and a
real local HTTP server standing in for the engine's /health.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import pytest

from deploy.deployable import Reason
from deploy.rollout import apply as rollout_apply
from deploy.rollout import cli
from deploy.rollout import journal as jr
from deploy.rollout.apply import Gates, Rollout, StepFailed, http_get
from deploy.rollout.compose_cli import Compose, ComposeError, Redactor, ServiceState, go_duration_s
from deploy.rollout.lock import LockHeld, ProjectLock
from deploy.rollout.manager import ManagerClient, ManagerError
from deploy.rollout.rehearsal import ManagerStandIn, compose_pass
from deploy.rollout.docker_api import ContainerState, demux
from deploy.rollout.in_container import announce, standin
from deploy.rollout.plan import FORCE_RECREATE, RECREATE, make_plan, refusals
from deploy.rollout.transform import rehearsal_model

LONG = "GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"
R1, R2 = "model-sg-glm53-w4afp8-tp4-r1", "model-sg-glm53-w4afp8-tp4-r2"
REGISTRAR, COLLECTOR, NGINX, PROXY = "model-proxy-registrar", "otelcol-contrib", "nginx", "proxy-glm53"
RUNFILES = Path(os.environ.get("TEST_SRCDIR", ".")) / os.environ.get("TEST_WORKSPACE", "")
COMPOSE_BIN = (RUNFILES / os.environ.get("COMPOSE_BIN", "")).absolute()
SECRET = "rollout-unit-test-env-value-0123456789"


def committed() -> str:
    return (RUNFILES / "compose" / LONG).read_text()


def states_of(text: str, tmp: Path, name: str, env_file: Path | None = None) -> dict[str, ServiceState]:
    path = tmp / f"{name}.yaml"
    path.write_text(text)
    return Compose(binary=COMPOSE_BIN, file=path, project="unit", env_file=env_file).states()


def plan_of(tmp: Path, mutated: str):
    return make_plan(states_of(committed(), tmp, "from"), states_of(mutated, tmp, "to"))


def replace_once(text: str, old: str, new: str) -> str:
    assert text.count(old) >= 1, f"{old!r} not in the committed file"
    return text.replace(old, new, 1)


# -- planner on the committed file ------------------------------------------------------------


def test_identical_revisions_change_nothing(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, committed())
    assert plan.changes == {}
    assert refusals(plan, [R2]) == [f"named services the target revision does not change: {R2}"]


def test_grace_period_in_the_shared_anchor_recreates_both_engines(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, replace_once(committed(), "  stop_grace_period: 5m\n", "  stop_grace_period: 10s\n"))
    assert {n: c.kind for n, c in plan.changes.items()} == {R1: RECREATE, R2: RECREATE}
    [reason] = refusals(plan, [R2])
    assert reason.startswith(f"the target revision also changes services not named with --services: {R1} (Compose recreate hash")
    assert refusals(plan, [R1, R2]) == []


def test_healthcheck_and_ports_are_changes_compose_acts_on(tmp_path: Path) -> None:
    text = replace_once(committed(), "      interval: 30s\n", "      interval: 31s\n")
    text = replace_once(text, '      - "8001:8001"\n', '      - "8002:8001"\n')
    plan = plan_of(tmp_path, text)
    assert {n: c.kind for n, c in plan.changes.items()} == {NGINX: RECREATE, REGISTRAR: RECREATE}


def test_scrape_label_change_needs_the_collector_force_recreated(tmp_path: Path) -> None:
    """r2's labels move in the collector's inline config: Compose's hash of the collector stays."""
    text = committed()
    # r2's scrape job and the engine_image label under it, whatever image r2 is pinned to now
    # (quoted when the short digest is all digits, which YAML would read as a number).
    r2_job = text.index("- job_name: sglang-model-sg-glm53-w4afp8-tp4-r2\n")
    pinned = re.compile(r'^ +engine_image: "?([0-9a-f]{12})"?\n', re.M).search(text, r2_job)
    label = pinned.group(0)
    plan = plan_of(tmp_path, replace_once(text, label, label.replace(pinned.group(1), "01282e5accd7")))
    change = plan.changes[COLLECTOR]
    assert change.kind == FORCE_RECREATE
    assert change.reasons[0].startswith("config otelcol_app_config content changed")
    assert list(plan.changes) == [COLLECTOR]
    assert any(f"not named with --services: {COLLECTOR} (config otelcol_app_config content changed" in r
               for r in refusals(plan, []))
    assert refusals(plan, [COLLECTOR]) == []


def test_a_rollout_naming_the_registrar_works(tmp_path: Path) -> None:
    """A registrar script edit: invisible to Compose's hash, planned as the registrar's forced recreate."""
    text = replace_once(committed(), "      MAX_RETRIES=3\n", "      MAX_RETRIES=4\n")
    plan = plan_of(tmp_path, text)
    assert {n: c.kind for n, c in plan.changes.items()} == {REGISTRAR: FORCE_RECREATE}
    assert refusals(plan, [REGISTRAR]) == []


def test_removing_a_service_is_refused(tmp_path: Path) -> None:
    text = committed()
    start = text.index("  dcgm-glm53:\n")
    end = text.index("  otelcol-contrib:\n")
    plan = plan_of(tmp_path, text[:start] + text[end:])
    assert any("would remove (orphan) dcgm-glm53" in r for r in refusals(plan, ["dcgm-glm53"]))


def test_unknown_service_is_refused(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, committed())
    assert any("neither revision defines" in r and "no-such-service" in r for r in refusals(plan, ["no-such-service"]))


def test_plan_prints_no_env_value(tmp_path: Path, capsys) -> None:
    env = tmp_path / "host.env"
    env.write_text("\n".join(f"{k}={SECRET}" for k in (
        "HUGGING_FACE_HUB_TOKEN", "PROXY_TOKEN", "MODEL_PROXY_TOKEN", "CLOUD_API_USAGE_TOKEN",
        "MONITORING_INGEST_TOKEN", "WEB_CONTEXT_SEARCH_API_KEY", "WEB_CONTEXT_SEARCH_URL")) + "\nHOST_IP=10.1.2.3\n")
    (tmp_path / "compose").mkdir()
    (tmp_path / "compose" / "to.yaml").write_text(replace_once(committed(), "      MAX_RETRIES=3\n", "      MAX_RETRIES=4\n"))
    (tmp_path / "compose" / "from.yaml").write_text(committed())
    os.environ["BUILD_WORKSPACE_DIRECTORY"] = os.environ["BUILD_WORKING_DIRECTORY"] = str(tmp_path)
    try:
        rc = cli.main(["--compose-bin", str(COMPOSE_BIN), "plan", "--from", "compose/from.yaml", "--to", "compose/to.yaml",
                       "--services", REGISTRAR, "--env-file", "host.env"])
    finally:
        del os.environ["BUILD_WORKSPACE_DIRECTORY"], os.environ["BUILD_WORKING_DIRECTORY"]
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert f"force-recreate  {REGISTRAR}" in out.out
    assert SECRET not in out.out + out.err and "10.1.2.3" not in out.out + out.err


def test_redactor_masks_env_file_values(tmp_path: Path) -> None:
    env = tmp_path / "host.env"
    env.write_text(f"PROXY_TOKEN={SECRET}\nFLAG=1\n")
    redact = Redactor.for_env_file(env)
    assert redact(f"error: bad value {SECRET} for x=1") == "error: bad value <redacted> for x=1"


def test_go_durations() -> None:
    assert go_duration_s("5m0s", "x") == 300.0
    assert go_duration_s("1h2m3.5s", "x") == 3723.5
    with pytest.raises(Exception, match="not a duration"):
        go_duration_s("5 minutes", "x")


# -- the deployability gate seam ----------------------------------------------------------------


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True).stdout.strip()


def _apply_argv(tmp: Path, *extra: str, to: str = "compose/to.yaml@HEAD") -> list[str]:
    return ["--compose-bin", str(COMPOSE_BIN), "apply", "--from", "compose/from.yaml@HEAD", "--to", to,
            "--services", REGISTRAR, "--project-name", "unit", "--journal", str(tmp / "j.json"),
            "--lock-dir", str(tmp / "locks"), "--verify-url", "http://127.0.0.1:9/v1/chat/completions", "--no-manager",
            "--main-ref", "main", *extra]


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch):
    """A git checkout with both revisions committed (the registrar's retries differ)."""
    monkeypatch.setenv("BUILD_WORKSPACE_DIRECTORY", str(tmp_path))
    monkeypatch.setenv("BUILD_WORKING_DIRECTORY", str(tmp_path))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    (tmp_path / "compose").mkdir()
    (tmp_path / "compose" / "from.yaml").write_text(committed())
    (tmp_path / "compose" / "to.yaml").write_text(replace_once(committed(), "      MAX_RETRIES=3\n", "      MAX_RETRIES=4\n"))
    _git(tmp_path, "init", "-q", "-b", "main")
    _git(tmp_path, "add", "compose")
    _git(tmp_path, "-c", "user.name=unit", "-c", "user.email=unit@test", "commit", "-q", "-m", "revisions")
    return tmp_path


def _passes(file: Path, root: Path) -> int:
    return 0


def test_non_deployable_target_is_refused(workspace: Path, capsys) -> None:
    seen = []

    def gate(path: Path) -> list[Reason]:
        seen.append(path.read_text())
        return [Reason("prod base pin is UNKNOWN", "run //recipes/bases:pin_prod"),
                Reason(f"engine_image of r2 in {path} is not the pin", "run //compose:update",
                       after="run //recipes/bases:pin_prod")]

    assert cli.main(_apply_argv(workspace), gate=gate, validate=_passes) == 1
    err = capsys.readouterr().err
    # The gate's own report: grouped by fix, the prerequisite first, the revision named.
    assert err.splitlines() == [
        "rollout: REFUSED: compose/to.yaml@HEAD: NOT DEPLOYABLE: 2 reasons, 2 fixes",
        "rollout: REFUSED:   fix 1: run //recipes/bases:pin_prod",
        "rollout: REFUSED:     - prod base pin is UNKNOWN",
        "rollout: REFUSED:   fix 2 (after fix 1): run //compose:update",
        "rollout: REFUSED:     - engine_image of r2 in compose/to.yaml@HEAD is not the pin",
    ]
    assert seen and "MAX_RETRIES=4" in seen[0]  # the gate saw the target revision
    assert not (workspace / "j.json").exists()


def test_validators_run_on_the_committed_target(workspace: Path, capsys) -> None:
    """//deploy/validators:check's checks judge the revision's file, in a checkout of that revision."""
    seen = []

    def validate(file: Path, root: Path) -> int:
        seen.append((file.relative_to(root).as_posix(), file.read_text()))
        return 1

    (workspace / "compose" / "to.yaml").write_text("uncommitted edit\n")  # not what apply judges
    assert cli.main(_apply_argv(workspace), gate=lambda p: [], validate=validate) == 1
    assert "REFUSED: compose/to.yaml@HEAD fails //deploy/validators:check" in capsys.readouterr().err
    assert seen[0][0] == "compose/to.yaml" and "MAX_RETRIES=4" in seen[0][1]


@pytest.mark.parametrize("edit", [True, False], ids=["dirty", "clean"])
def test_a_work_tree_target_is_refused(workspace: Path, capsys, edit: bool) -> None:
    if edit:
        (workspace / "compose" / "to.yaml").write_text(committed() + "# an edit nobody reviewed\n")
    rc = cli.main(_apply_argv(workspace, to="compose/to.yaml"), gate=lambda p: [], validate=_passes)
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "REFUSED: --to compose/to.yaml is the work tree's file and " in err
    assert ("it has uncommitted changes (M compose/to.yaml)" in err) == edit, err
    assert "pass --to compose/to.yaml@<commit> (docs/rollout.md" in err
    assert not (workspace / "j.json").exists()


def test_an_unmerged_target_is_refused(workspace: Path, capsys) -> None:
    _git(workspace, "checkout", "-q", "-b", "review")
    (workspace / "compose" / "to.yaml").write_text(replace_once(committed(), "      MAX_RETRIES=3\n", "      MAX_RETRIES=5\n"))
    _git(workspace, "-c", "user.name=unit", "-c", "user.email=unit@test", "commit", "-q", "-am", "not merged")
    commit = _git(workspace, "rev-parse", "HEAD")
    main = _git(workspace, "rev-parse", "main")
    assert cli.main(_apply_argv(workspace), gate=lambda p: [], validate=_passes) == 1
    assert (f"REFUSED: --to compose/to.yaml@HEAD: commit {commit[:12]} is not on main ({main[:12]}): apply deploys "
            "merged revisions only; merge it") in capsys.readouterr().err
    argv = _apply_argv(workspace)
    argv[argv.index("--main-ref") + 1] = "origin/main"
    assert cli.main(argv, gate=lambda p: [], validate=_passes) == 1
    assert "REFUSED: --main-ref origin/main is not a commit in" in capsys.readouterr().err
    assert not (workspace / "j.json").exists()


def test_rehearsal_needs_a_marked_endpoint_under_the_temp_dir(workspace: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(workspace.parent))
    monkeypatch.setenv("DOCKER_HOST", "unix:///var/run/docker.sock")
    assert cli.main(_apply_argv(workspace, "--rehearsal", to="compose/to.yaml")) == 1
    assert "REFUSED: --rehearsal needs DOCKER_HOST to be a unix socket under" in capsys.readouterr().err
    monkeypatch.setenv("DOCKER_HOST", f"unix://{workspace}/podman.sock")  # under the temp dir, unmarked
    assert cli.main(_apply_argv(workspace, "--rehearsal", to="compose/to.yaml")) == 1
    assert f"{workspace} has no glm53-rehearsal-endpoint file" in capsys.readouterr().err


def test_rehearsal_skips_the_gate(workspace: Path, capsys, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(workspace.parent))

    def gate(path: Path) -> list[Reason]:
        raise AssertionError("the gate must not run with --rehearsal")

    (workspace / cli.REHEARSAL_MARKER).write_text("")
    # Past the gate the tool asks Compose for the running containers; here there is no engine.
    assert cli.main(_apply_argv(workspace, "--rehearsal", to="compose/to.yaml"), gate=gate, validate=gate) == 2
    out = capsys.readouterr()
    assert "--rehearsal: the validators and the deployability gate are skipped" in out.out
    assert "docker-compose ps --all --quiet model-proxy-registrar" in out.err


def _engine_argv(tmp: Path, *extra: str) -> list[str]:
    (tmp / "compose" / "to.yaml").write_text(replace_once(committed(), "stop_grace_period: 5m", "stop_grace_period: 6m"))
    _git(tmp, "-c", "user.name=unit", "-c", "user.email=unit@test", "commit", "-q", "-am", "grace")
    argv = _apply_argv(tmp, *extra)
    argv[argv.index("--services") + 1] = R1
    argv.insert(argv.index("--services") + 2, R2)
    return argv


def test_engines_need_a_drain_decision(workspace: Path, capsys) -> None:
    assert cli.main(_engine_argv(workspace), gate=lambda p: [], validate=_passes) == 1
    assert (f"rolling {R1}, {R2} needs --drain-via PROXY_SERVICE (a proxy with the drain API) or --no-drain"
            in capsys.readouterr().err)


def test_wait_bound_below_the_start_period_is_refused(workspace: Path, capsys) -> None:
    assert cli.main(_engine_argv(workspace, "--no-drain", "--wait-timeout-s", "1800"), gate=lambda p: [],
                    validate=_passes) == 1
    assert (f"--wait-timeout-s 1800 is below {R1}'s healthcheck start_period (3600 s): a slow, healthy start would "
            "be rolled back") in capsys.readouterr().err


def test_a_second_rollout_of_the_project_is_refused_naming_the_holder(workspace: Path, capsys) -> None:
    holder = ProjectLock(workspace / "locks", "unit")
    holder.acquire("rollout apply", workspace / "first.json")
    try:
        assert cli.main(_apply_argv(workspace), gate=lambda p: [], validate=_passes) == 1
        err = capsys.readouterr().err
        assert f"REFUSED: another rollout of project unit holds {workspace}/locks/glm53-rollout.unit.lock: pid {os.getpid()} " \
               f"(`rollout apply`, journal {workspace}/first.json, since 20" in err, err
        assert not (workspace / "j.json").exists()
        with pytest.raises(LockHeld):  # the same for any other holder, e.g. a rollback of another journal
            ProjectLock(workspace / "locks", "unit").acquire("rollout rollback", workspace / "other.json")
        ProjectLock(workspace / "locks", "other-project").acquire("rollout apply", workspace / "x.json")
    finally:
        holder.release()
    again = ProjectLock(workspace / "locks", "unit")
    again.acquire("rollout apply", workspace / "j.json")  # released: the next one gets it
    again.release()


# -- apply, automatic rollback, journal ------------------------------------------------------------


# serve_forever wakes to notice shutdown() every poll_interval (0.5 s by default), so each server
# a test stopped cost up to half a second of waiting (about 20 s of this target's 40 s). Requests
# wake it at once either way; the interval only bounds how long shutdown() waits.
SHUTDOWN_POLL_S = 0.01


@contextlib.contextmanager
def serving(server: ThreadingHTTPServer) -> Iterator[ThreadingHTTPServer]:
    """`server` answering on a daemon thread (and its handler threads daemons) until the block ends."""
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, args=(SHUTDOWN_POLL_S,), daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()


class Health(BaseHTTPRequestHandler):
    healthy: set[str] = set()  # container ids whose /health answers 200
    in_flight: list[int] = [0]  # what successive /metrics scrapes report (the last one repeats)
    scrapes: list[str] = []  # a log line per scrape, in order with the calls

    def do_GET(self) -> None:
        if self.path == "/metrics":
            value = Health.in_flight.pop(0) if len(Health.in_flight) > 1 else Health.in_flight[0]
            Health.scrapes.append(f"metrics {value}")
            body = (f'sglang:num_running_reqs{{model_name="m"}} {value}.0\n'
                    f'sglang:num_queue_reqs{{model_name="m"}} 0.0\n').encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        cid = self.path.split("/")[1]
        self.send_response(200 if cid in Health.healthy else 503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def health_server():
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Health)) as server:
        yield server.server_address[1]


class FakeCompose:
    """Records lifecycle calls; containers are named after the revision that started them."""

    def __init__(self, revision: str, world: dict, calls: list) -> None:
        self.revision, self.world, self.calls = revision, world, calls
        self.project = "unit"

    def container_id(self, service: str) -> str | None:
        return self.world.get(service)

    def stop(self, service: str, grace_s: float) -> None:
        self.calls.append((self.revision, "stop", service, grace_s))

    def remove(self, service: str) -> None:
        self.calls.append((self.revision, "rm", service))
        self.world.pop(service, None)

    def up(self, service: str, wait_timeout_s: float, watch=None) -> None:
        self.calls.append((self.revision, "up", service))
        if not (self.world.get(service) or "").startswith(self.revision):
            self.world[service] = f"{self.revision}-{service}-{len(self.calls)}"

    def pull(self, service: str, timeout_s: float) -> None:
        self.calls.append((self.revision, "pull", service))
        if self.world.get("pull fails"):
            raise ComposeError(f"docker-compose pull --policy missing {service} exited 1:\nmanifest unknown")

    def run_check(self, service: str, env: dict, timeout_s: float) -> tuple[int, str]:
        self.calls.append((self.revision, "check", service, dict(env)))
        return 0, "ok"


class FakeDocker:
    log = "[2026-12-06 19:00:00] INFO: The server is fired up and ready to roll!\n"  # every container's log

    def state(self, container_id: str) -> ContainerState:
        return ContainerState(container_id, True, 0, ("127.0.0.1",), "healthy")

    def logs(self, container_id: str) -> str:
        return FakeDocker.log

    def image_present(self, reference: str) -> bool:
        return True

    def config_hash(self, container_id: str) -> str:
        return "h-" + container_id.split("-", 1)[0]  # the revision that started it


def _rollout(tmp: Path, port: int, world: dict, calls: list, services: list[str], peers: tuple[str, ...] = (),
             **gates) -> Rollout:
    """`peers`: engines of both revisions that this rollout does not replace (they keep serving)."""
    journal = jr.Journal.create(tmp / "j.json", "unit", services, "A", "a: 1\n", "B", "b: 1\n", None, tmp)
    states = {rev: {s: ServiceState(s, f"h-{rev}", {}, grace_s=300.0, health_port=port, image=f"img-{rev}")
                    for s in [*services, *peers]} for rev in "AB"}
    g = Gates(health_timeout_s=5.0, healthy_probes=2, probe_interval_s=0.01, bake_s=0.0, **gates)
    rollout = Rollout(journal, FakeCompose("A", world, calls), FakeCompose("B", world, calls), g, FakeDocker(),
                      states["A"], states["B"], say=lambda line: None)
    # /health of container X is /X: which containers are healthy is up to the test.
    rollout._health_url = lambda service, cid, states: f"http://127.0.0.1:{port}/{cid}"
    return rollout


def test_healthy_rollout_replaces_with_the_grace_period(tmp_path: Path, health_server: int, monkeypatch) -> None:
    world, calls = {R2: "A-r2"}, []
    monkeypatch.setattr(Health, "healthy", {f"B-{R2}-4"})
    rollout = _rollout(tmp_path, health_server, world, calls, [R2])
    assert rollout.apply() == 0
    assert calls == [("B", "pull", R2), ("A", "stop", R2, 300.0), ("A", "rm", R2), ("B", "up", R2)]
    journal = json.loads((tmp_path / "j.json").read_text())
    assert journal["state"] == "done" and journal["entries"][R2] == {"step": "rolled", "old_container": "A-r2",
                                                                     "new_container": f"B-{R2}-4", "drained": False}


class VirtualClock:
    """apply's deadlines in virtual time that only the rollout's own sleeps advance: a health
    gate that never passes fails after health_timeout_s / probe_interval_s probes (500), not
    after 5 s of waiting, and the rollback's gate gets its 2 probes however loaded the machine."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def virtual_clock(monkeypatch) -> VirtualClock:
    clock = VirtualClock()
    monkeypatch.setattr(rollout_apply, "time", clock)  # apply reads only time.monotonic
    return clock


def test_failed_health_gate_rolls_back_automatically(tmp_path: Path, health_server: int, monkeypatch,
                                                     virtual_clock: VirtualClock) -> None:
    world, calls = {R2: "A-r2"}, []
    monkeypatch.setattr(Health, "healthy", {f"A-{R2}-7"})  # only the rolled-back container answers
    rollout = _rollout(tmp_path, health_server, world, calls, [R2])
    rollout.sleep = virtual_clock.sleep
    assert rollout.apply() == 1
    assert calls == [("B", "pull", R2), ("A", "stop", R2, 300.0), ("A", "rm", R2), ("B", "up", R2),
                     ("B", "stop", R2, 300.0), ("B", "rm", R2), ("A", "up", R2)]
    journal = json.loads((tmp_path / "j.json").read_text())
    assert journal["state"] == "rolled-back" and journal["entries"][R2]["step"] == "rolled-back"
    assert "health gate failed" in journal["error"]


def test_interrupted_rollout_blocks_a_new_one_and_can_be_rolled_back(tmp_path: Path, health_server: int, monkeypatch) -> None:
    world, calls = {R1: "A-r1", R2: "A-r2"}, []
    monkeypatch.setattr(Health, "healthy", {f"B-{R1}-3", f"A-{R1}-6", "A-r2"})  # r2 serves while r1 rolls
    rollout = _rollout(tmp_path, health_server, world, calls, [R1, R2])
    rollout.roll(R1)  # r1 rolled, then the operator's session dies before r2
    with pytest.raises(jr.JournalError, match="an unfinished rollout"):
        jr.Journal.create(tmp_path / "j.json", "unit", [R2], "A", "", "B", "", None, tmp_path)
    loaded = jr.Journal.load(tmp_path / "j.json")
    assert loaded.touched() == [R1]
    rollout.journal = loaded
    assert rollout.rollback() == 1
    assert calls[-3:] == [("B", "stop", R1, 300.0), ("B", "rm", R1), ("A", "up", R1)]
    assert jr.Journal.load(tmp_path / "j.json").state == "rolled-back"


class PeerDocker(FakeDocker):
    """r1's container state as its own healthcheck reports it."""

    health = "healthy"

    def state(self, container_id: str) -> ContainerState:
        health = PeerDocker.health if container_id == "A-r1" else "healthy"
        return ContainerState(container_id, True, 0, ("127.0.0.1",), health)


@pytest.mark.parametrize("r1, docker_health, why", [
    ("A-r1", "healthy", "answered HTTP 503 on http://127.0.0.1:"),  # /health of r1 fails
    ("A-r1", "unhealthy", "is not healthy (container A-r1 running=True, health unhealthy)"),
    (None, "healthy", "has no container"),
], ids=["health-503", "docker-unhealthy", "no-container"])
def test_r2_is_not_stopped_unless_r1_is_healthy(tmp_path: Path, health_server: int, monkeypatch, r1: str | None,
                                                 docker_health: str, why: str) -> None:
    world, calls = {R2: "A-r2", **({R1: r1} if r1 else {})}, []
    monkeypatch.setattr(Health, "healthy", {f"B-{R2}-4"} | ({"A-r1"} if docker_health == "unhealthy" else set()))
    monkeypatch.setattr(PeerDocker, "health", docker_health)
    said: list[str] = []
    rollout = _rollout(tmp_path, health_server, world, calls, [R2], peers=(R1,))
    rollout.docker, rollout.say = PeerDocker(), said.append
    assert rollout.apply() == 1
    assert calls == [("B", "pull", R2)] and world[R2] == "A-r2"  # r2 untouched
    assert said[1].startswith(f"rollout: FAILED: {R2}: peer check failed: {R1}, which keeps serving while {R2} is "
                              f"replaced, "), said
    assert why in said[1] and f"nothing stops until it is healthy: look at `docker logs {R1}`" in said[1], said[1]
    assert said[2].startswith(f"rollout: nothing was stopped; {R2} run A as before (docs/rollout.md, \"Canary on r2\")")
    assert jr.Journal.load(tmp_path / "j.json").state == jr.FAILED


def test_a_healthy_r1_lets_r2_roll(tmp_path: Path, health_server: int, monkeypatch) -> None:
    world, calls = {R1: "A-r1", R2: "A-r2"}, []
    monkeypatch.setattr(Health, "healthy", {"A-r1", f"B-{R2}-4"})
    said: list[str] = []
    rollout = _rollout(tmp_path, health_server, world, calls, [R2], peers=(R1,))
    rollout.say = said.append
    assert rollout.apply() == 0, said
    assert f"rollout: {R2}: {R1} healthy (2 probes each): they keep serving while {R2} is replaced" in said
    assert calls[1:] == [("A", "stop", R2, 300.0), ("A", "rm", R2), ("B", "up", R2)]


@pytest.fixture
def proxy_standin():
    """The rehearsal's proxy stand-in with its drain API, routing to one dead backend per replica."""
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), standin.make_handler([(R1, 9), (R2, 9)]))) as server:
        yield server.server_address[1]


def _draining(port: int) -> dict[str, bool]:
    from deploy.rollout.drain import Drainer

    return {b: Drainer("127.0.0.1", port).draining(b) for b in (R1, R2)}


def test_order_pull_drain_wait_stop_start_check_restore(tmp_path: Path, health_server: int, proxy_standin: int,
                                                         monkeypatch) -> None:
    world, calls = {R2: "A-r2", PROXY: "A-proxy"}, []
    monkeypatch.setattr(Health, "healthy", {f"B-{R2}-4"})
    monkeypatch.setattr(Health, "in_flight", [2, 1, 0])  # two streams finish after the drain
    monkeypatch.setattr(Health, "scrapes", [])
    rollout = _rollout(tmp_path, health_server, world, calls, [R2], drain_via=PROXY, drain_port=proxy_standin,
                       check_service="glm53-perception-check")
    seen = []
    stop = FakeCompose.stop

    def recording_stop(self, service, grace_s):  # what the proxy and the engine said when the stop came
        seen.append((_draining(proxy_standin), list(Health.scrapes)))
        stop(self, service, grace_s)

    monkeypatch.setattr(FakeCompose, "stop", recording_stop)
    assert rollout.apply() == 0
    assert calls == [("B", "pull", R2), ("A", "stop", R2, 300.0), ("A", "rm", R2), ("B", "up", R2),
                     ("B", "check", "glm53-perception-check", {"PERCEPTION_TARGETS": f"{R2}=http://{R2}:{health_server}"})]
    assert seen == [({R1: False, R2: True}, ["metrics 2", "metrics 1", "metrics 0"])]  # drained, then 0 in flight
    assert _draining(proxy_standin) == {R1: False, R2: False}  # restored
    assert not jr.Journal.load(tmp_path / "j.json").entries[R2].drained


def test_a_failing_pull_stops_nothing(tmp_path: Path, health_server: int, proxy_standin: int) -> None:
    world, calls = {R2: "A-r2", PROXY: "A-proxy", "pull fails": True}, []
    said: list[str] = []
    rollout = _rollout(tmp_path, health_server, world, calls, [R2], drain_via=PROXY, drain_port=proxy_standin)
    rollout.say = said.append
    assert rollout.apply() == 1
    assert calls == [("B", "pull", R2)] and world[R2] == "A-r2"
    assert _draining(proxy_standin) == {R1: False, R2: False}
    assert said[0].startswith(f"rollout: FAILED: {R2}: pull failed: docker-compose pull --policy missing {R2} exited 1")
    assert said[1].startswith(f"rollout: nothing was stopped; {R2} run A as before")
    assert jr.Journal.load(tmp_path / "j.json").state == jr.FAILED


def test_a_failing_pull_on_resume_rolls_back_what_was_stopped(tmp_path: Path, health_server: int,
                                                               monkeypatch) -> None:
    """A resume whose pull fails after the first run stopped r2 must not leave r2 down."""
    world, calls = {"pull fails": True}, []
    monkeypatch.setattr(Health, "healthy", {f"A-{R2}-2"})
    rollout = _rollout(tmp_path, health_server, world, calls, [R2])
    rollout.journal.record(R2, jr.STOPPING, "", old_container="A-r2")  # killed after the stop
    assert rollout.apply() == 1
    assert calls == [("B", "pull", R2), ("A", "up", R2)] and world[R2] == f"A-{R2}-2"
    assert jr.Journal.load(tmp_path / "j.json").state == jr.ROLLED_BACK


def test_resume_does_not_replace_a_container_already_on_the_target(tmp_path: Path, health_server: int,
                                                                   monkeypatch) -> None:
    """Killed after `up` created r2's new container: the resume waits for it instead of replacing it."""
    world, calls = {R2: f"B-{R2}-killed"}, []
    monkeypatch.setattr(Health, "healthy", {f"B-{R2}-killed"})
    rollout = _rollout(tmp_path, health_server, world, calls, [R2])
    rollout.journal.record(R2, jr.STOPPING, "", old_container="A-r2")
    assert rollout.apply() == 0
    assert calls == [("B", "pull", R2), ("B", "up", R2)]
    assert jr.Journal.load(tmp_path / "j.json").entries[R2].step == jr.ROLLED


# -- verification: r2's own address, and the proxy path served by r2 ----------------------------------


class R2Engine(BaseHTTPRequestHandler):
    """r2 on its own address: chat completions, and /metrics with its served-request counter."""

    served = 0
    status = 200

    def do_GET(self) -> None:
        body = f'sglang:num_requests_total{{model_name="m",is_streaming="false"}} {R2Engine.served}.0\n'.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        if R2Engine.status == 200:
            R2Engine.served += 1
        body = json.dumps({"choices": [{"message": {"content": "ok"}}]} if R2Engine.status == 200 else {}).encode()
        self.send_response(R2Engine.status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


class Proxy(BaseHTTPRequestHandler):
    """A proxy whose routing the test scripts: answer i (from 0) comes from `upstreams[i]`; an
    answer from r2 is counted by r2 (R2Engine.served), one from r1 is not. With `answer_alone`
    the proxy answers by itself, as it does /v1/models."""

    protocol_version = "HTTP/1.1"
    upstreams: list[str] = []
    status = 200
    served = 0
    header = True  # the proxy names its upstream in X-Upstream
    hold = threading.Event()  # set: answer; clear: hold every request (a hung upstream)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        i, Proxy.served = Proxy.served, Proxy.served + 1
        Proxy.hold.wait()
        upstream = Proxy.upstreams[min(i, len(Proxy.upstreams) - 1)]
        if Proxy.status == 200 and upstream == R2:
            R2Engine.served += 1
        body = json.dumps({"choices": [{"message": {"content": "ok"}}]} if Proxy.status == 200 else {}).encode()
        self.send_response(Proxy.status)
        if Proxy.header:
            self.send_header("X-Upstream", upstream)
        if Proxy.status == 502:
            self.send_header("X-Upstream-Errors", f"{R2}:8000 timed out")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def proxy(monkeypatch):
    monkeypatch.setattr(Proxy, "served", 0)
    monkeypatch.setattr(Proxy, "status", 200)
    monkeypatch.setattr(Proxy, "header", True)
    monkeypatch.setattr(R2Engine, "served", 0)
    monkeypatch.setattr(R2Engine, "status", 200)
    Proxy.hold.set()
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Proxy)) as proxy_server, \
            serving(ThreadingHTTPServer(("127.0.0.1", 0), R2Engine)) as engine_server:
        try:
            yield (f"http://127.0.0.1:{proxy_server.server_address[1]}/v1/chat/completions",
                   engine_server.server_address[1])
        finally:
            Proxy.hold.set()  # a held request must finish before its server stops


def _verifier(tmp: Path, proxy: tuple[str, int], said: list[str], header: str | None = "X-Upstream", **gates) -> Rollout:
    url, engine_port = proxy
    journal = jr.Journal.create(tmp / "j.json", "unit", [R2], "A", "", "B", "", None, tmp)
    g = Gates(verify_url=url, verify_upstream_header=header, probe_interval_s=0.01, **gates)
    states = {R2: ServiceState(R2, "h-B", health_port=engine_port, model="z-ai/glm-5.3-flash")}
    return Rollout(journal, None, None, g, FakeDocker(), states, states, say=said.append, sleep=lambda s: None)


def test_verification_waits_until_the_proxy_routes_to_the_new_container(tmp_path: Path, proxy, monkeypatch) -> None:
    # The proxy keeps the new r2 out of its rotation for six answers (it has not noticed it yet).
    monkeypatch.setattr(Proxy, "upstreams", [R1] * 6 + [R2])
    said: list[str] = []
    _verifier(tmp_path, proxy, said).verify(R2, "B-r2")
    assert Proxy.served == 7
    assert said[0] == f"rollout: {R2}: served a chat completion on its own address http://127.0.0.1:{proxy[1]}"
    assert said[-1].startswith(f"rollout: {R2}: verified through {proxy[0]} (7 requests, slowest ")
    assert said[-1].endswith(f"; served by {R2}: X-Upstream: {R2})")


def test_verification_reads_r2s_own_counter_without_a_proxy_header(tmp_path: Path, proxy, monkeypatch) -> None:
    """The production proxy names no upstream: r2's sglang:num_requests_total says it served."""
    monkeypatch.setattr(Proxy, "upstreams", [R1, R1, R2, R1])
    monkeypatch.setattr(Proxy, "header", False)
    said: list[str] = []
    _verifier(tmp_path, proxy, said, header=None).verify(R2, "B-r2")
    assert Proxy.served == 4  # the proof came at request 3; --verify-requests is 4
    assert said[-1].endswith(f"; served by {R2}: {R2}'s sglang:num_requests_total 1 -> 2 across request 3)"), said[-1]


@pytest.mark.parametrize("header", [True, False], ids=["upstream-header", "no-header"])
def test_an_answer_that_never_reaches_r2_fails_verification(tmp_path: Path, proxy, monkeypatch, header: bool) -> None:
    """200s through the proxy (as /v1/models, which the proxy answers alone) are not r2 serving."""
    monkeypatch.setattr(Proxy, "upstreams", [R1])
    monkeypatch.setattr(Proxy, "header", header)
    seen = rf"; X-Upstream: \['{R1}'\]" if header else ""
    with pytest.raises(StepFailed, match=rf"^{R2}: verification failed: none of \d+ requests through .* within 0 s was "
                                         rf"served by {R2} \(its sglang:num_requests_total stayed at 1{seen}\): the proxy "
                                         rf"does not route to it"):
        _verifier(tmp_path, proxy, [], header="X-Upstream" if header else None, verify_within_s=0.0).verify(R2, "B-r2")


def test_verification_needs_r2_to_answer_on_its_own_address(tmp_path: Path, proxy, monkeypatch) -> None:
    monkeypatch.setattr(Proxy, "upstreams", [R2])
    monkeypatch.setattr(R2Engine, "status", 500)
    with pytest.raises(StepFailed, match=rf"^{R2}: verification failed: a chat completion on {R2}'s own address "
                                         rf"http://127.0.0.1:{proxy[1]}: HTTP 500"):
        _verifier(tmp_path, proxy, []).verify(R2, "B-r2")
    assert Proxy.served == 0


def test_verification_reports_the_proxys_own_error(tmp_path: Path, proxy, monkeypatch) -> None:
    monkeypatch.setattr(Proxy, "upstreams", [R1])
    monkeypatch.setattr(Proxy, "status", 502)
    with pytest.raises(StepFailed, match=rf"request 1 through .*: HTTP 502 after .* s \(X-Upstream: {R1}\); "
                                         rf"the proxy's errors: {R2}:8000 timed out$"):
        _verifier(tmp_path, proxy, []).verify(R2, "B-r2")


def test_verification_request_bound_names_the_request(tmp_path: Path, proxy, monkeypatch) -> None:
    monkeypatch.setattr(Proxy, "upstreams", [R2])
    Proxy.hold.clear()  # the proxy never answers: only the request's own bound ends the wait
    with pytest.raises(StepFailed, match=rf"^{R2}: verification failed: request 1 through .*: no answer within 0.2 s "
                                         r"\(timed out\) after"):
        _verifier(tmp_path, proxy, [], verify_timeout_s=0.2).verify(R2, "B-r2")


def test_a_verify_url_the_proxy_answers_alone_is_refused(workspace: Path, capsys) -> None:
    argv = _apply_argv(workspace)
    argv[argv.index("--verify-url") + 1] = "http://127.0.0.1:8000/v1/models"
    assert cli.main(argv, gate=lambda p: [], validate=_passes) == 1
    assert ("REFUSED: --verify-url http://127.0.0.1:8000/v1/models: verification posts a chat completion through the "
            "proxy path, which only an engine can answer (the proxy answers /v1/models without one)") in capsys.readouterr().err


def test_standin_502_names_each_backend_and_why() -> None:
    refused = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    port = refused.server_address[1]
    refused.server_close()  # nothing listens there any more: connections are refused
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), standin.make_handler([("127.0.0.1", port)]))) as server:
        status, headers = http_get(f"http://127.0.0.1:{server.server_address[1]}/v1/models", 5.0)
    assert status == 502
    assert headers["x-upstream-errors"].startswith(f"127.0.0.1:{port} ") and "refused" in headers["x-upstream-errors"]


def test_announce_finds_the_default_gateway() -> None:
    routes = ("Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
              "eth0\t00000000\t0A0FC90A\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"
              "eth0\t000FC90A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n")
    assert announce.default_gateway(routes) == "10.201.15.10"
    assert announce.default_gateway(routes.splitlines()[0] + "\n" + routes.splitlines()[2]) is None


# -- the rehearsal transform -------------------------------------------------------------------------


def test_rehearsal_has_no_gpu_and_keeps_what_compose_acts_on(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(committed())
    model = Compose(binary=COMPOSE_BIN, file=path, project="unit", profiles=("*",)).model()
    images = {s["image"]: f"local/{n}" for n, s in model["services"].items() if n in (R1, R2)}
    out = rehearsal_model(model, images, "local/base", "/l", "/s", "10.250.1.0/24", 18000, frozenset({R2}))
    services = out.model["services"]
    assert sorted(services) == ["glm53-perception-check", "model-downloader", R1, R2, NGINX, "proxy-glm53"]
    assert out.dropped == ["dcgm-glm53", "glm53-soak-relay", "hf-cleanup", REGISTRAR, COLLECTOR]
    text = json.dumps(out.model)
    assert "nvidia" not in text and "device_ids" not in text and '"ipc"' not in text
    for name in (R1, R2):
        assert services[name]["stop_grace_period"] == "5m0s" and services[name]["init"] is True
        assert services[name]["healthcheck"] == model["services"][name]["healthcheck"]  # the committed one
        assert "--enable-metrics" in services[name]["command"]  # the drain reads its in-flight gauges
    assert services["glm53-perception-check"]["profiles"] == ["verification"]
    for name, service in services.items():  # a replaced container's new MAC reaches its peers at start
        assert service["command"][:3] == ["python3", "/rehearsal/announce.py", "--"], name
    assert "no-such-model" in " ".join(services[R2]["command"]) and "no-such-model" not in " ".join(services[R1]["command"])
    assert services[NGINX]["ports"] == [{"target": 8000, "published": "18000", "host_ip": "127.0.0.1", "protocol": "tcp"}]
    assert [a for a in services["proxy-glm53"]["command"] if a.startswith("http")] == [
        f"http://{R1}:8000", f"http://{R2}:8000"]


def test_rollback_command_restores_from_the_journal_copy(workspace: Path, capsys) -> None:
    """`rollout rollback --journal J` rebuilds both revisions from the journal's own copies."""
    journal = jr.Journal.create(workspace / "j.json", "unit", [R2], "compose/F@old", committed(), "compose/F",
                                committed(), None, workspace)
    journal.record(R2, jr.STARTED, "", old_container="old", new_container="new")
    rc = cli.main(["--compose-bin", str(COMPOSE_BIN), "rollback", "--journal", "j.json", "--lock-dir", str(workspace / "locks")])
    out = capsys.readouterr().out
    assert f"rollout: rolling back {R2} to compose/F@old" in out
    # No engine here: restoring r2 fails at Compose's `ps`, and the journal says so.
    assert rc == 3 and "ROLLBACK FAILED" in out
    assert jr.Journal.load(workspace / "j.json").state == jr.ROLLBACK_FAILED


# -- the perception check the rollout runs (the committed file's own script) ---------------------------


class Engine(BaseHTTPRequestHandler):
    """An engine replica as the perception check sees it; the chat answer is up to the test."""

    message: dict = {}
    finish_reason = "stop"
    asked: list[dict] = []  # the chat requests' bodies

    def _json(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._json({"data": [{"id": "z-ai/glm-5.3-flash"}]} if self.path == "/v1/models" else {})

    def do_POST(self) -> None:
        Engine.asked.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self._json({"choices": [{"message": {"role": "assistant", **Engine.message},
                                 "finish_reason": Engine.finish_reason}]})

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def engine(monkeypatch):
    monkeypatch.setattr(Engine, "asked", [])
    monkeypatch.setattr(Engine, "finish_reason", "stop")
    with serving(ThreadingHTTPServer(("127.0.0.1", 0), Engine)) as server:
        yield f"http://127.0.0.1:{server.server_address[1]}"


def _committed_check(tmp: Path) -> Path:
    """The perception check as the committed file deploys it (its config content, via Compose)."""
    path = tmp / "committed.yaml"
    path.write_text(committed())
    model = Compose(binary=COMPOSE_BIN, file=path, project="unit", profiles=("*",)).model()
    script = tmp / "perception_check.py"
    script.write_text(model["configs"]["perception_check"]["content"])
    return script


class CheckingCompose(FakeCompose):
    """`run_check` runs the committed perception check against the test's engine."""

    script: Path
    engine_url: str

    def run_check(self, service: str, env: dict, timeout_s: float) -> tuple[int, str]:
        self.calls.append((self.revision, "check", service))
        name = env["PERCEPTION_TARGETS"].split("=", 1)[0]
        proc = subprocess.run([sys.executable, str(self.script)], capture_output=True, text=True, timeout=60,
                              env={"MODEL_NAME": "z-ai/glm-5.3-flash", "PERCEPTION_TARGETS": f"{name}={self.engine_url}"})
        return proc.returncode, proc.stdout + proc.stderr


THINKING = {"content": None, "reasoning_content": "The image is one solid colour. The pixels are (220, 20, 20): red. "
            "The user wants one word, so I will answer"}


@pytest.mark.parametrize("message, rolled_back", [
    (THINKING, False),  # the budget ran out while GLM was thinking: the thinking names the colour
    ({"content": "Red.", "reasoning_content": "Solid red pixels."}, False),
    ({"content": None, "reasoning_content": None}, True),  # nothing at all
    ({"content": "", "reasoning_content": "Hmm, maybe blue?"}, True),  # wrong, in the thinking
    ({"content": "Blue.", "reasoning_content": "It is not red, it is blue."}, True),  # the answer is judged
    ({"content": "It is bored.", "reasoning_content": ""}, True),  # a word containing r-e-d is not red
], ids=["all-reasoning", "answered", "empty", "wrong-reasoning", "wrong-answer", "substring"])
def test_perception_check_judges_glm_reasoning(tmp_path: Path, health_server: int, engine: str, monkeypatch,
                                               message: dict, rolled_back: bool) -> None:
    monkeypatch.setattr(Engine, "message", message)
    monkeypatch.setattr(Engine, "finish_reason", "length" if message is THINKING else "stop")
    monkeypatch.setattr(CheckingCompose, "script", _committed_check(tmp_path), raising=False)
    monkeypatch.setattr(CheckingCompose, "engine_url", engine, raising=False)
    world, calls = {R2: "A-r2"}, []
    monkeypatch.setattr(Health, "healthy", {f"B-{R2}-4", f"A-{R2}-8"})
    said: list[str] = []
    rollout = _rollout(tmp_path, health_server, world, calls, [R2], check_service="glm53-perception-check")
    rollout.deployed = CheckingCompose("A", world, calls)
    rollout.target = CheckingCompose("B", world, calls)
    rollout.say = said.append
    assert rollout.apply() == (1 if rolled_back else 0), "\n".join(said)
    assert ("rolled back" in "\n".join(said)) == rolled_back
    # GLM's thinking needs room: far more than the 512 tokens a one-word answer would.
    assert Engine.asked and Engine.asked[0]["max_tokens"] >= 4096
    if rolled_back:
        assert "expected 'red' in the answer" in "\n".join(said)


# -- the compose manager's handover ----------------------------------------------------------------


class FakeManager:
    """Records the handover calls in the same list as the lifecycle calls."""

    def __init__(self, calls: list, fail: str | None = None) -> None:
        self.calls, self.fail = calls, fail

    def pause(self, services: list[str], holder: str) -> dict:
        self.calls.append(("manager", "pause", tuple(services)))
        if self.fail == "pause":
            raise ManagerError("POST http://127.0.0.1:9/reconcile/pause: Connection refused")
        return {}

    def resume(self, services: list[str], revision: str, file: str | None) -> dict:
        self.calls.append(("manager", "resume", tuple(services), revision, Path(file).name))
        if self.fail == "resume":
            raise ManagerError("POST http://127.0.0.1:9/reconcile/resume answered 500: busy")
        return {}


def _managed(tmp: Path, port: int, world: dict, calls: list, fail: str | None = None, **gates) -> Rollout:
    rollout = _rollout(tmp, port, world, calls, [R2], manager_url="http://127.0.0.1:9", **gates)
    rollout.manager = FakeManager(calls, fail)
    return rollout


def test_the_manager_is_paused_before_the_stop_and_resumed_on_the_target(tmp_path: Path, health_server: int,
                                                                         monkeypatch) -> None:
    world, calls = {R2: "A-r2"}, []
    monkeypatch.setattr(Health, "healthy", {f"B-{R2}-5"})
    rollout = _managed(tmp_path, health_server, world, calls)
    assert rollout.apply() == 0
    assert calls == [("B", "pull", R2), ("manager", "pause", (R2,)), ("A", "stop", R2, 300.0), ("A", "rm", R2),
                     ("B", "up", R2), ("manager", "resume", (R2,), "B", "to.yaml")]
    assert not jr.Journal.load(tmp_path / "j.json").manager_paused


def test_a_rolled_back_rollout_resumes_the_manager_on_the_deployed_revision(tmp_path: Path, health_server: int,
                                                                            monkeypatch,
                                                                            virtual_clock: VirtualClock) -> None:
    world, calls = {R2: "A-r2"}, []
    monkeypatch.setattr(Health, "healthy", {f"A-{R2}-8"})  # the target never turns healthy
    rollout = _managed(tmp_path, health_server, world, calls)
    rollout.sleep = virtual_clock.sleep
    assert rollout.apply() == 1
    assert calls[1] == ("manager", "pause", (R2,)) and calls[-1] == ("manager", "resume", (R2,), "A", "from.yaml")
    assert [c[1] for c in calls if c[0] == "manager"] == ["pause", "resume"]


def test_an_unreachable_manager_stops_nothing(tmp_path: Path, health_server: int, monkeypatch) -> None:
    world, calls = {R2: "A-r2"}, []
    said: list[str] = []
    rollout = _managed(tmp_path, health_server, world, calls, fail="pause")
    rollout.say = said.append
    assert rollout.apply() == 1
    assert calls == [("B", "pull", R2), ("manager", "pause", (R2,))] and world[R2] == "A-r2"
    assert said[1] == (f"rollout: FAILED: {R2}: manager pause failed: POST http://127.0.0.1:9/reconcile/pause: Connection "
                       f"refused; the compose manager must stop reconciling them first (docs/rollout.md, \"Compose manager\")")
    assert said[2].endswith("(docs/rollout.md, \"Compose manager\")")


def test_a_manager_that_does_not_resume_is_exit_4(tmp_path: Path, health_server: int, monkeypatch) -> None:
    world, calls = {R2: "A-r2"}, []
    monkeypatch.setattr(Health, "healthy", {f"B-{R2}-5"})
    said: list[str] = []
    rollout = _managed(tmp_path, health_server, world, calls, fail="resume")
    rollout.say = said.append
    assert rollout.apply() == 4
    assert said[-1].startswith("rollout: FAILED: the compose manager was not resumed: POST http://127.0.0.1:9/reconcile/"
                               f"resume answered 500: busy; it still does not reconcile {R2}: resume it against B")
    journal = jr.Journal.load(tmp_path / "j.json")
    assert journal.state == jr.DONE and journal.manager_paused


def test_rollback_of_a_finished_rollout_pauses_the_manager_first(tmp_path: Path, health_server: int,
                                                                 monkeypatch) -> None:
    world, calls = {R2: "B-r2"}, []
    monkeypatch.setattr(Health, "healthy", {f"A-{R2}-4"})
    rollout = _managed(tmp_path, health_server, world, calls)
    rollout.journal.record(R2, jr.ROLLED, "", old_container="A-r2", new_container="B-r2")
    assert rollout.rollback() == 1
    assert calls == [("manager", "pause", (R2,)), ("B", "stop", R2, 300.0), ("B", "rm", R2), ("A", "up", R2),
                     ("manager", "resume", (R2,), "A", "from.yaml")]


def test_engines_need_a_manager_decision(workspace: Path, capsys) -> None:
    argv = _apply_argv(workspace)
    argv.remove("--no-manager")
    assert cli.main(argv, gate=lambda p: [], validate=_passes) == 1
    assert ("REFUSED: say how the host's compose manager hands the services over: --manager-url URL (it stops "
            "reconciling them during the roll, then reconciles against the target) or --no-manager") in capsys.readouterr().err


def test_manager_standin_pause_waits_for_the_running_pass_and_stops_passes(tmp_path: Path) -> None:
    """The stand-in's contract, through the rollout's own client: a pause answers only after the
    running pass, no pass runs while paused, and a resume moves it to the rolled revision."""
    in_pass, release = threading.Event(), threading.Event()
    runs: list[tuple[str, tuple[str, ...]]] = []

    def run_pass(file: Path, services: list[str]) -> str:
        runs.append((file.name, tuple(services)))
        in_pass.set()
        release.wait()
        return "up to date"

    manager = ManagerStandIn("A", tmp_path / "a.yaml", [R1, R2], run_pass, interval_s=3600)
    manager.start()
    try:
        client = ManagerClient(manager.url)
        passing = threading.Thread(target=manager.reconcile_once)
        passing.start()
        assert in_pass.wait(30)
        # The pass holds on: the pause must not answer (its request's own bound ends the wait).
        with pytest.raises(ManagerError, match="timed out"):
            ManagerClient(manager.url, timeout_s=0.5).pause([R2], "unit")
        release.set()
        passing.join()
        assert client.pause([R2], "rollout j.json")["paused"] == [R2]
        assert manager.reconcile_once() is None and len(runs) == 1  # paused: no pass
        state = client.resume([R2], "B", str(tmp_path / "b.yaml"))
        assert state == {"paused": [], "revision": "B", "passes": 1}
        assert manager.reconcile_once().revision == "B" and runs[-1] == ("b.yaml", (R1, R2))
        with pytest.raises(ManagerError, match="answered 400"):
            client.pause(["no-such-service"], "unit")
    finally:
        release.set()
        manager.stop()


# -- the startup log gate ------------------------------------------------------------------------------


@pytest.mark.parametrize("log, why", [
    ("INFO: Load weight end.\nINFO: The server is fired up and ready to roll!\n", None),
    ("INFO: The server is fired up and ready to roll!\nERROR: CUDA error 801: operation not supported\n",
     "logged 1 fatal line(s), the first: 'ERROR: CUDA error 801: operation not supported'"),
    ("INFO: Load weight end.\nTraceback (most recent call last):\n  File x\ntorch.OutOfMemoryError: CUDA out of memory\n",
     "logged 2 fatal line(s), the first: 'Traceback (most recent call last):'"),
    ("INFO: Load weight end.\n", "has not logged 'The server is fired up and ready to roll!' within 0.05 s (1 lines"),
], ids=["ready", "cuda-801", "oom", "never-ready"])
def test_startup_log_gate(tmp_path: Path, health_server: int, monkeypatch, log: str, why: str | None) -> None:
    world, calls = {R2: "A-r2"}, []
    monkeypatch.setattr(Health, "healthy", {f"B-{R2}-4", f"A-{R2}-7"})
    monkeypatch.setattr(FakeDocker, "log", log)
    said: list[str] = []
    rollout = _rollout(tmp_path, health_server, world, calls, [R2])
    rollout.gates = Gates(**{**rollout.gates.__dict__, "health_timeout_s": 0.05})
    rollout.say = said.append
    assert rollout.apply() == (0 if why is None else 1), said
    if why is None:
        assert f"rollout: {R2}: startup log says ready, no fatal line (2 lines)" in said
    else:
        [failed] = [line for line in said if line.startswith("rollout: FAILED: ")]
        assert failed.startswith(f"rollout: FAILED: {R2}: startup log failed: container {f'B-{R2}'[:12]} ") and why in failed, failed
        assert said[-1] == f"rollout: rolled back: {R2} on A"


def test_demux_reads_dockers_multiplexed_log() -> None:
    frames = b"\x01\0\0\0\0\0\0\x06ready\n" + b"\x02\0\0\0\0\0\0\x04err\n"
    assert demux(frames) == b"ready\nerr\n"
    assert demux(b"raw tty output\n") == b"raw tty output\n"


def test_a_container_the_manager_did_not_make_from_from_is_refused(tmp_path: Path) -> None:
    """e.g. the manager deployed r2 with another env map: its hash is not --from's."""
    states = {R2: ServiceState(R2, "h-manager-env", health_port=8000)}
    with pytest.raises(cli.Refused, match=rf"^{R2}: the running container \(A-r2, hash h-A\) was not deployed from "
                                          r"--from .*pass the file and tag it deployed as --from and the env map it "
                                          r"deployed with as --env-file \(docs/rollout.md, \"Compose manager\"\)$"):
        cli.check_running_revision(FakeDocker(), FakeCompose("A", {R2: "A-r2"}, []), states, [R2])


class PassCompose:
    """What compose_pass asks of Compose: `run` (recorded) and `hashes` (the file's)."""

    project = "unit"

    def __init__(self, calls: list) -> None:
        self.calls = calls

    def run(self, *args: str, timeout_s: float = 0) -> subprocess.CompletedProcess:
        self.calls.append(args)
        return subprocess.CompletedProcess(args, 0, "", "")

    def hashes(self) -> dict[str, str]:
        return {R1: "h-A", R2: "h-A"}


class PassDocker:
    def container_ids(self, project: str, service: str) -> list[str]:
        return {R1: ["A-r1"], R2: ["B-r2"]}[service]  # r2 was rolled to B behind the manager's back

    def config_hash(self, container_id: str) -> str:
        return "h-" + container_id.split("-", 1)[0]


def test_the_standin_managers_pass_puts_back_what_differs_from_its_file(tmp_path: Path) -> None:
    """Why the rollout pauses it: unpaused, its next pass over A undoes r2's roll to B."""
    calls: list = []
    output = compose_pass(lambda file: PassCompose(calls), PassDocker())(tmp_path / "a.yaml", [R1, R2])
    assert calls == [("up", "--detach", "--remove-orphans", "--no-deps", "--no-recreate", R1, R2),
                     ("up", "--detach", "--no-deps", "--force-recreate", R2)]
    assert output.endswith(f"recreated {R2} (hash h-B -> h-A)")


def test_verification_of_a_service_that_is_not_an_engine(tmp_path: Path, proxy, monkeypatch) -> None:
    """The registrar: no own address to ask and no counter; the proxy path answers, slowly."""
    monkeypatch.setattr(Proxy, "upstreams", [R1])
    said: list[str] = []
    journal = jr.Journal.create(tmp_path / "j.json", "unit", [REGISTRAR], "A", "", "B", "", None, tmp_path)
    states = {REGISTRAR: ServiceState(REGISTRAR, "h-B"), R1: ServiceState(R1, "h-B", health_port=proxy[1], model="m")}
    g = Gates(verify_url=proxy[0], probe_interval_s=0.01, verify_within_s=0.0)
    Rollout(journal, None, None, g, FakeDocker(), states, states, say=said.append, sleep=lambda s: None).verify(REGISTRAR, "x")
    assert Proxy.served == 4 and said == [f"rollout: {REGISTRAR}: verified through {proxy[0]} (4 requests, slowest "
                                          f"{said[0].split('slowest ')[1]}"]
