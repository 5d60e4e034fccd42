"""@host_tools: the versions of the host programs the integration tests run (local_config_cc's pattern).

A `local` repository rule, so it probes the host again whenever Bazel's server starts (and on
`bazel sync --configure`); the tests that run those programs carry `versions.txt`, so a host
upgrade changes their inputs and reruns them instead of serving a cached pass. The probing is
tools/ci/host_tools.py, which //tools/ci:host_tools_test also runs to check the file.
"""

load("//tools/python:interpreter.bzl", "PYTHON3")

def _host_tools_impl(rctx):
    script = rctx.path(Label("//tools/ci:host_tools.py"))
    res = rctx.execute([PYTHON3, str(script)], timeout = 120)
    if res.return_code != 0:
        fail("tools/ci/host_tools.py failed (exit {}):\n{}".format(res.return_code, res.stderr))
    rctx.file("versions.txt", res.stdout)
    rctx.file("BUILD.bazel", 'exports_files(["versions.txt"], visibility = ["//visibility:public"])\n')
    rctx.file("WORKSPACE", 'workspace(name = "{}")\n'.format(rctx.name))

host_tools = repository_rule(
    implementation = _host_tools_impl,
    local = True,
    configure = True,
    doc = "Writes versions.txt: the kernel release and each integration test's host program with its version.",
)
