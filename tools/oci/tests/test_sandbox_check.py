"""sandbox_check.py on aquery documents: what it refuses, and that it asks for the aspect actions."""

from __future__ import annotations

from tools.oci import sandbox_check


def _aquery(*actions: tuple[str, list[str]]) -> dict:
    return {"targets": [{"id": i, "label": f"//x:t{i}"} for i in range(len(actions))],
            "actions": [{"targetId": i, "mnemonic": m, "executionInfo": [{"key": k} for k in keys]}
                        for i, (m, keys) in enumerate(actions)]}


def test_sandbox_check_refuses_unsandboxed_build_actions_and_unexplained_local_tests() -> None:
    ok = _aquery(("DebianRootfs", []), ("PythonWheelsLayer", ["no-remote-exec"]),
                 ("TestRunner", ["local", "no-sandbox", "requires-podman"]))
    assert sandbox_check.violations(ok) == []
    bad = _aquery(("DebianRootfs", ["no-sandbox", "requires-network"]), ("TestRunner", ["local"]))
    assert sandbox_check.violations(bad) == [
        "//x:t0 (DebianRootfs): build action with no-sandbox, requires-network; declare its inputs and let it run sandboxed",
        "//x:t1 (TestRunner): test with local but no requires-<reason> tag saying why",
    ]


def test_sandbox_check_sees_aspect_actions() -> None:
    # The layer SBOM scans (LayerSbom) are aspect actions: a plain aquery does not list them.
    argv = sandbox_check.aquery_argv("./tools/bazel", ["//..."])
    assert "--include_aspects" in argv and argv[-2] == "mnemonic('.*', //...)"
