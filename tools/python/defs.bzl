"""Public BUILD-file API for Python in this repository. WORKSPACE uses pip.bzl."""

load("//tools/python/private:program.bzl", _py_program = "py_program")
load("//tools/python/private:pytest.bzl", _py_pytest_test = "py_pytest_test")

py_program = _py_program
py_pytest_test = _py_pytest_test
