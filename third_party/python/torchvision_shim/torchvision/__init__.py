"""CPU-test shim for `torchvision`. Not a vision library: never ship it to a GPU image.

PyPI's torchvision wheels link libtorch_cuda.so and fail to import beside the CPU build of
torch ("operator torchvision::nms does not exist"), yet sglang imports `torchvision.io` and
others at module level. This shim lets those imports succeed: every `torchvision.<sub>` module
and attribute resolves to a placeholder, and calling one raises, so a CPU test that really
needs a vision op fails loudly instead of computing something wrong.

It ships no dist-info on purpose: transformers' `is_torchvision_available()` checks package
metadata and stays False, so transformers never routes image processing through this shim.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+cpu-test-shim"
SHIM = True


class _Placeholder:
    def __init__(self, qualname: str) -> None:
        self._qualname = qualname

    def __getattr__(self, name: str) -> "_Placeholder":
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self._qualname}.{name}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(
            f"{self._qualname} called, but torchvision here is the CPU-test shim "
            "(third_party/python/torchvision_shim); vision ops are unavailable on CPU tests"
        )

    def __mro_entries__(self, bases):
        # `class X(torchvision.Foo)` at import time: subclass a plain object instead.
        return (object,)

    def __repr__(self) -> str:
        return f"<torchvision shim placeholder {self._qualname}>"


class _ShimModule(types.ModuleType):
    def __getattr__(self, name: str) -> _Placeholder:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self.__name__}.{name}")


class _ShimFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _ShimModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module) -> None:
        pass


sys.meta_path.insert(0, _ShimFinder())
