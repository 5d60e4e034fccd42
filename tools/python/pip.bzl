"""WORKSPACE API for hash-locked Python dependencies, modeled on rules_python's pip.bzl."""

load("//tools/python/private:pip_repository.bzl", _pip_repository = "pip_repository")

def pip_parse(name, requirements_lock, **kwargs):
    """Makes @<name> from a hash-locked lock; BUILD files load @<name>//:requirements.bzl.

    Args:
      name: repository name.
      requirements_lock: label of a lock written by //tools/python:lock.
      **kwargs: extract (default True), python_interpreter, quiet, timeout.
    """
    _pip_repository(name = name, requirements_lock = requirements_lock, **kwargs)
