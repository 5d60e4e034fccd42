"""py_program: the one way this repository declares a py_binary; the import root of every program."""

def workspace_root_imports():
    """`imports` that put the workspace root of the runfiles on sys.path.

    Every module is imported by its path from the workspace root (`tools.oci.layer`,
    `deploy.releases`), whichever package the program or test is in, so no file needs a
    sys.path prelude. Bazel's import of every runfiles repository would do it too, but only
    while --experimental_python_import_all_repositories keeps its default.
    """
    package = native.package_name()
    return ["/".join([".."] * len(package.split("/")))] if package else ["."]

def py_program(name, srcs = None, main = None, imports = [], **kwargs):
    """A py_binary on the registered Python 3 toolchain (//tools/python:py_toolchain).

    Args:
      name: target name.
      srcs: sources; default [name + ".py"].
      main: the program's file; default: the one source when there is one (any name).
      imports: extra import roots besides the workspace root.
      **kwargs: passed to py_binary (args, data, deps, testonly, visibility, ...).
    """
    srcs = srcs or [name + ".py"]
    if main == None and len(srcs) == 1:
        main = srcs[0]
    native.py_binary(
        name = name,
        srcs = srcs,
        main = main,
        imports = workspace_root_imports() + imports,
        python_version = "PY3",
        **kwargs
    )
