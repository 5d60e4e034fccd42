"""The full rollout rehearsal (the full tier): the long-context deployment on podman, four phases.

The stack is deploy/rollout/rehearsal_stack.py's full one: storage of its own, v3 only in a
loopback registry, revisions A (r1 = r2 = v2), B (the committed file, r2 on v3), C (r2 broken:
its server never starts) and D (r2's image a digest the registry does not have), and a stand-in
compose manager from the end of phase 1.

1. deploy A with `up --wait`: every engine healthy;
2. `rollout apply` A -> D: the pull fails before anything stops; r2 keeps running A;
3. `rollout apply` A -> B: pull, drain, stop (5 min grace), start, check, restore; a second
   apply of the project meanwhile is refused naming the first; the first is killed (SIGKILL,
   with its Compose child) once r2's old container is gone, and `apply --resume` finishes it;
4. `rollout apply` B -> C: the gate fails, the tool rolls r2 back to B on its own.

Through phases 2-4 the client sees no failed request and r1 misses no probe. The light
rehearsal in `bazel test //...` (rehearsal_light_test.py) runs phase 1 and a straight A -> B.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from deploy.rollout.rehearsal_stack import (R1, R2, Stack, assert_served_through, changed, deploy_all_healthy, log,
                                            rollout_failure, running, through_proxy, wait_until)
from deploy.rollout.transform import PROXY


@pytest.fixture(scope="module")
def stack():
    yield from running(full=True)


def test_1_deploy_all_healthy(stack: Stack) -> None:
    stack.begin("phase 1: deploy A (r1=v2, r2=v2) with `up --detach --wait`")
    containers = deploy_all_healthy(stack)
    stack.start_manager()
    stack.manager_pass("on the deployment")
    assert not changed(containers, stack.containers()), "the manager's pass over what it deployed replaced a container"
    stack.passed()


def test_2_failing_pull_stops_nothing(stack: Stack) -> None:
    stack.begin("phase 2: rollout apply A -> D for r2 (r2's image is not in the registry)")
    before = stack.containers()
    stack.set_phase("pull-fails")
    proc = stack.rollout("a", "d", "journal-pull.json")
    after = stack.containers()
    counts = stack.log_probes("pull-fails")
    assert proc.returncode == 1, rollout_failure("phase 2 (expected exit 1)", proc)
    out = proc.stdout
    assert f"rollout: FAILED: {R2}: pull failed" in out and "nothing was stopped" in out, out
    assert f"{R2}: stopping" not in out and f"{R2}: drained" not in out, "the rollout touched r2 before its image was there"
    assert not changed(before, after) and after[R2]["image"] == stack.images["v2"]
    assert counts[R2][1] == 0, f"r2 missed probes while its pull failed: {counts[R2]}"
    assert json.loads((stack.tmp / "journal-pull.json").read_text())["state"] == "failed"
    assert_served_through(stack, "pull-fails", counts)
    stack.passed()


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
        wait_until(lambda: journal.exists() or first.poll() is not None, 600, "the first apply writes its journal")
        assert first.poll() is None, f"the first apply exited {first.returncode} early: {(stack.tmp / 'apply-1.log').read_text()}"
        second = stack.rollout("a", "b", "journal-second.json")
        assert second.returncode == 1, rollout_failure("the second apply (expected refused)", second)
        assert f"another rollout of project {stack.project} holds" in second.stderr, second.stderr
        assert f"pid {first.pid} (`rollout apply`, journal {journal}" in second.stderr, second.stderr
        assert not (stack.tmp / "journal-second.json").exists()
        wait_until(lambda: before[R2]["id"] not in {c["id"] for c in stack.containers().values()} or first.poll() is not None,
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
    assert_served_through(stack, "roll-v3", counts)
    assert state["state"] == "applying" and state["entries"][R2]["drained"], state["entries"]
    assert proc.returncode == 0, rollout_failure(f"phase 3 resume ({R2} to v3)", proc)
    first_out = (stack.tmp / "apply-1.log").read_text()
    assert first_out.index(f"{R2}: image {stack.pulled_ref} present") < first_out.index(f"{R2}: drained from {PROXY}") \
        < first_out.index(f"{R2}: stopping"), "pull, drain, stop: not in that order"
    assert "(grace 300 s)" in first_out, "the stop did not use the committed 5 min grace period"
    assert f"{R2}: glm53-perception-check passed against http://{R2}:8000" in proc.stdout, proc.stdout
    assert changed(before, after) == {R2} and set(after) == set(before)
    assert after[R2]["image"] == stack.images["v3"]
    assert stack.api.image_present(stack.pulled_ref), "v3 is not in podman under the registry's reference"
    assert stack.proxy_backends() == {R1: False, R2: False}, "r2 is not back in the proxy's rotation"
    state = stack.api.state(after[R2]["id"])
    assert state.running and state.health == "healthy"
    answers = through_proxy(stack.port, 4, "phase 3")
    log(f"  through the proxy path: {answers}")
    assert all(status == 200 for status, _ in answers) and any(up == R2 for _, up in answers), (
        f"phase 3: through the proxy path, every answer 200 and one from {R2}: {answers}")
    assert f"{R2}: served a chat completion on its own address" in proc.stdout, proc.stdout
    assert f"served by {R2}: {R2}'s sglang:num_requests_total" in proc.stdout, proc.stdout
    assert f"the compose manager reconciles {R2} again, against {stack.files['b']}" in proc.stdout, proc.stdout
    assert not stack.manager.paused and stack.manager.revision == str(stack.files["b"])
    stack.manager_pass("after the roll")
    assert not changed(after, stack.containers()), "the manager's pass after the roll replaced a container"
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
    assert proc.returncode == 1, rollout_failure(f"phase 4 ({R2} to a broken release, expected exit 1)", proc)
    assert "rollout: FAILED:" in proc.stdout and f"{R2}: rolled back to" in proc.stdout, proc.stdout
    assert changed(before, after) == {R2}
    assert after[R2]["image"] == stack.images["v3"], "r2 is not back on the previous release"
    state = stack.api.state(after[R2]["id"])
    assert state.running and state.health == "healthy"
    stack.prober.wait_for("roll-broken", counts[R2][0] + 10, timeout_s=60)
    assert stack.prober.last("roll-broken", R2, 10) == [200] * 10, "r2 is not answering /health after the rollback"
    assert stack.proxy_backends() == {R1: False, R2: False}, "r2 is not back in the proxy's rotation"
    journal = json.loads((stack.tmp / "journal-broken.json").read_text())
    assert journal["state"] == "rolled-back" and journal["entries"][R2]["step"] == "rolled-back"
    assert_served_through(stack, "roll-broken", counts)
    assert f"the compose manager reconciles {R2} again, against {stack.files['b']}" in proc.stdout, proc.stdout
    stack.manager_pass("after the rollback")
    assert not changed(after, stack.containers()), "the manager's pass after the rollback replaced a container"
    stack.set_phase("end")
    stack.passed()
