"""py_program: the one way this repository declares a py_binary."""

def py_program(name, srcs = None, main = None, **kwargs):
    """A py_binary on the registered Python 3 toolchain (//tools/python:py_toolchain).

    Args:
      name: target name.
      srcs: sources; default [name + ".py"].
      main: the program's file; default: the one source when there is one (any name).
      **kwargs: passed to py_binary (args, data, deps, testonly, visibility, ...).
    """
    srcs = srcs or [name + ".py"]
    if main == None and len(srcs) == 1:
        main = srcs[0]
    native.py_binary(
        name = name,
        srcs = srcs,
        main = main,
        python_version = "PY3",
        **kwargs
    )
