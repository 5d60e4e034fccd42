"""The light rollout rehearsal (in `bazel test //...`): deploy, then one health-gated roll of r2.

The stack is deploy/rollout/rehearsal_stack.py's light one: the long-context deployment on
podman's Docker API in the project's shared podman storage, revisions A (r1 = r2 = v2) and B
(the committed file, r2 on v3), both images loaded into podman, no compose manager; /health of
both engines probed every 200 ms, a client's chat completions through nginx -> proxy every
500 ms.

1. deploy A with `up --wait`: every engine healthy, answering through nginx -> proxy;
2. `rollout apply` A -> B for r2, the command an operator runs (`--no-manager`, a 2 s bake):
   pull (v3 is present), peer check of r1, drain, stop with the committed 5 min grace, `up
   --wait`, the health and startup-log gates, the perception check against r2, restore, the
   verification through the proxy path; exit 0, only r2 replaced, on v3, healthy and back in
   the proxy's rotation; r1 missed no probe and no client request failed.

The full rehearsal (rehearsal_test.py, the full tier that CI runs) adds the pull from a registry,
a failing pull, a killed and resumed apply, a concurrent apply refused, an automatic rollback and
the compose manager's pause and resume.
"""

from __future__ import annotations

import json

import pytest

from deploy.rollout.rehearsal_stack import (R1, R2, Stack, assert_served_through, changed, deploy_all_healthy, log,
                                            rollout_failure, running, through_proxy)
from deploy.rollout.transform import PROXY


@pytest.fixture(scope="module")
def stack():
    yield from running(full=False)


def test_1_deploy_all_healthy(stack: Stack) -> None:
    stack.begin("phase 1: deploy A (r1=v2, r2=v2) with `up --detach --wait`")
    deploy_all_healthy(stack)
    stack.passed()


def test_2_roll_r2_to_v3(stack: Stack) -> None:
    stack.begin("phase 2: rollout apply A -> B for r2 (r2 to v3)")
    before = stack.containers()
    stack.log_containers("before", before)
    stack.set_phase("roll-v3")
    proc = stack.rollout("a", "b", "journal-v3.json")
    after = stack.containers()
    stack.log_containers("after ", after)
    counts = stack.log_probes("roll-v3")
    assert proc.returncode == 0, rollout_failure(f"phase 2 ({R2} to v3)", proc)
    out = proc.stdout
    assert out.index(f"{R2}: image {stack.pulled_ref} present") < out.index(f"{R2}: drained from {PROXY}") \
        < out.index(f"{R2}: stopping"), "pull, drain, stop: not in that order"
    assert "(grace 300 s)" in out, "the stop did not use the committed 5 min grace period"
    assert f"{R2}: glm53-perception-check passed against http://{R2}:8000" in out, out
    assert f"{R2}: served a chat completion on its own address" in out, out
    assert f"served by {R2}: {R2}'s sglang:num_requests_total" in out, out
    assert json.loads((stack.tmp / "journal-v3.json").read_text())["state"] == "done"
    assert changed(before, after) == {R2} and set(after) == set(before)
    assert after[R2]["image"] == stack.images["v3"]
    state = stack.api.state(after[R2]["id"])
    assert state.running and state.health == "healthy"
    assert stack.proxy_backends() == {R1: False, R2: False}, "r2 is not back in the proxy's rotation"
    assert_served_through(stack, "roll-v3", counts)
    answers = through_proxy(stack.port, 4, "phase 2")
    log(f"  through the proxy path: {answers}")
    assert all(status == 200 for status, _ in answers) and any(up == R2 for _, up in answers), (
        f"phase 2: through the proxy path, every answer 200 and one from {R2}: {answers}")
    stack.set_phase("end")
    stack.passed()
