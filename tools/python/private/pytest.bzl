"""py_pytest_test: a py_test whose main is the pytest launcher."""

load("@pip_tools//:requirements.bzl", "requirement")
load(":program.bzl", "workspace_root_imports")

def py_pytest_test(name, srcs, deps = [], data = [], args = [], imports = [], **kwargs):
    """Runs pytest on `srcs` (and any conftest.py among them) as one Bazel test.

    Args:
      name: target name.
      srcs: test files; conftest.py files go here too.
      deps: libraries the tests import.
      data: runtime files.
      args: extra pytest arguments.
      imports: extra import roots besides the workspace root.
      **kwargs: passed to py_test (size, env, tags, ...).
    """
    launcher = "//tools/python:pytest_main.py"
    shard = "//tools/python:pytest_shard.py"
    kwargs.setdefault("size", "small")
    test_files = [s for s in srcs if not s.endswith("conftest.py")]
    native.py_test(
        name = name,
        srcs = srcs + [launcher, shard],
        main = launcher,
        python_version = "PY3",
        deps = deps + [requirement("pytest")],
        data = data,
        args = ["$(rootpath {})".format(s) for s in test_files] + args,
        imports = workspace_root_imports() + imports,
        **kwargs
    )
