"""Public BUILD-file API for Python in this repository. WORKSPACE uses pip.bzl."""

load("//tools/python/private:program.bzl", _py_program = "py_program", _workspace_root_imports = "workspace_root_imports")
load("//tools/python/private:pytest.bzl", _py_pytest_test = "py_pytest_test")

py_program = _py_program
py_pytest_test = _py_pytest_test
workspace_root_imports = _workspace_root_imports
