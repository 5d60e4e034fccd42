"""The SGLang versions this package supports, and what it calls in each.

`check()` runs when the HTTP server starts (offload_process.serve_http): a version not listed,
or a name missing from a listed module, stops the server with an error naming it, instead of
an AttributeError on the first image request.
"""

from __future__ import annotations

import importlib
from typing import Dict, Optional, Tuple

# SGLang version -> module -> the names the package uses from it.
USES: Dict[str, Dict[str, Tuple[str, ...]]] = {
    "0.5.19": {
        "sglang.srt.environ": ("envs",),
        # sliced_pickle builds the frame SGLang's sock_send would send.
        "sglang.srt.managers.io_struct": ("BaseReq", "_USE_PICKLE_IPC", "msgpack_encode"),
        "sglang.srt.managers.mm_utils": (
            "ShmPointerMMData",
            "_shm_pointers",
            "uses_shm_features",
            "wrap_shm_features",
        ),
        "sglang.srt.managers.schedule_batch": (
            "Modality",
            "MultimodalDataItem",
            "MultimodalInputFormat",
            "MultimodalProcessorOutput",
        ),
        "sglang.srt.runtime_context": ("publish",),
        "sglang.srt.utils.stale_shm_cleanup": ("make_shm_name",),
    },
}

# 0.5.23 (patches/v4): the same names; `ShmPointerMMData.adopt`, `_shm_pointers` and
# `uses_shm_features` are added to mm_utils by v4's offload-process.diff, as by v3's on 0.5.19.
USES["0.5.23"] = USES["0.5.19"]

SUPPORTED = tuple(sorted(USES))


class UnsupportedSGLang(ImportError):
    """This SGLang is not one the package was written against."""


def installed_version() -> str:
    from sglang.version import __version__

    return __version__


def check(version: Optional[str] = None, import_module=importlib.import_module) -> None:
    """Raise UnsupportedSGLang naming the version or the first missing name."""
    version = version or installed_version()
    uses = USES.get(version)
    if uses is None:
        raise UnsupportedSGLang(
            f"glm53_offload supports SGLang {', '.join(SUPPORTED)}, not {version}: add its row "
            "to glm53_offload/sglang_support.py USES once the hooks are re-anchored"
        )
    for module_name, names in uses.items():
        try:
            module = import_module(module_name)
        except ImportError as error:
            raise UnsupportedSGLang(
                f"glm53_offload needs module {module_name} of SGLang {version}: {error}"
            ) from error
        for name in names:
            if not hasattr(module, name):
                raise UnsupportedSGLang(
                    f"glm53_offload needs {module_name}.{name}, which SGLang {version} does not "
                    "have: re-anchor the hook that provides it (patches/ for this version)"
                )
