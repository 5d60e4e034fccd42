"""Find glm53_offload/stall_dump.py beside the first sglang/ on sys.path and load it.

The stall-dump scenarios load the module file straight from the first
sys.path entry that has it, without running ``sglang/__init__``: that package
init imports torch and transformers (about 6 s of CPU per process), which
would slow every child and skew the CPU and timing checks on a busy machine.
The module is stdlib-only by design, so loading it alone is faithful; the
suite's ``package-import`` scenario also imports it under its real dotted
name and checks that both resolve to the same file.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

MODULE_NAME = "glm53_offload.stall_dump"
MODULE_RELPATH = Path("glm53_offload", "stall_dump.py")
HTTP_SERVER_RELPATH = Path("sglang", "srt", "entrypoints", "http_server.py")
_LOADED_NAME = "_event_loop_stall_dump_under_test"


def locate(relpath: Path = MODULE_RELPATH) -> Path:
    """The file for ``relpath`` in the first sys.path entry holding sglang/."""
    for entry in sys.path:
        root = Path(entry or os.getcwd())
        if (root / "sglang" / "__init__.py").is_file():
            candidate = root / relpath
            if candidate.is_file():
                return candidate
            raise ModuleNotFoundError(
                f"{candidate} does not exist: the sglang tree first on sys.path "
                f"({root}) has no {relpath}; put the patched tree first on "
                "PYTHONPATH"
            )
    raise ModuleNotFoundError(
        f"no sglang package on sys.path; put the tree that holds sglang/ "
        f"(e.g. the patched copy) on PYTHONPATH to test {relpath}"
    )


def load_stall_dump_module() -> ModuleType:
    """Execute the located module file as a stand-alone module."""
    if _LOADED_NAME in sys.modules:
        return sys.modules[_LOADED_NAME]
    path = locate()
    spec = importlib.util.spec_from_file_location(_LOADED_NAME, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot build an import spec for {path}")
    module = importlib.util.module_from_spec(spec)
    # dataclasses resolve annotations through sys.modules[__module__].
    sys.modules[_LOADED_NAME] = module
    spec.loader.exec_module(module)
    return module
