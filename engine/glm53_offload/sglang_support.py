"""The SGLang versions this package supports, and what it calls in each.

`check()` runs when the HTTP server starts (offload_process.serve_http): a version not listed,
or a name missing from a listed module, stops the server with an error naming it, instead of
an AttributeError on the first image request.
"""

from __future__ import annotations

import importlib
import logging
from typing import Dict, Optional, Tuple

logger = logging.getLogger(__name__)

# SGLang version -> module -> the names the package uses from it.
USES: Dict[str, Dict[str, Tuple[str, ...]]] = {
    "0.5.19": {
        "sglang.srt.environ": ("envs",),
        # sliced_pickle builds the frame SGLang's sock_send would send.
        "sglang.srt.managers.io_struct": ("BaseReq", "_USE_PICKLE_IPC", "msgpack_encode"),
        "sglang.srt.managers.mm_utils": (
            "ShmPointerMMData",
            "_get_is_default_transport",
            "discard_mm_inputs_shm",
            "discard_shm_features",
            "wrap_shm_features",
        ),
        "sglang.srt.managers.schedule_batch": (
            "Modality",
            "MultimodalDataItem",
            "MultimodalInputFormat",
            "MultimodalProcessorOutput",
        ),
        "sglang.srt.runtime_context": ("get_serving", "publish"),
        "sglang.srt.utils.stale_shm_cleanup": ("make_shm_name",),
    },
}

# SGLang version -> (module, function) pairs that build and cache state per tokenizer object on
# their first call. fill_tokenizer_caches calls them for the preprocessing lanes' tokenizer copies
# at start-up: 0.5.23's chat encode plan parses the tokenizer's whole JSON in one C call, which
# held the GIL 250 ms on a lane (the event loop stalled as long) on the first chat after start.
TOKENIZER_CACHES: Dict[str, Tuple[Tuple[str, str], ...]] = {
    "0.5.19": (),
    "0.5.23": (("sglang.srt.entrypoints.openai.parallel_prompt_encode", "_segment_encoder_for"),),
}

# 0.5.23 (patches/v4): the same names, and its tokenizer caches; `discard_mm_inputs_shm` is
# added to mm_utils by v4's offload-process.diff, as by v3's on 0.5.19.
USES["0.5.23"] = {
    **USES["0.5.19"],
    **{module: (function,) for module, function in TOKENIZER_CACHES["0.5.23"]},
}

SUPPORTED = tuple(sorted(USES))

# SGLang version -> whether its stock OpenAI serving converts a request (chat-template rendering,
# tokenization) off the event loop. A tokenizer manager without the preprocessing lanes (a test
# double, another frontend) gets what that version's stock code does: 0.5.19 converts on the loop,
# 0.5.23 on the loop's default executor.
STOCK_CONVERTS_OFF_LOOP: Dict[str, bool] = {"0.5.19": False, "0.5.23": True}


class UnsupportedSGLang(ImportError):
    """This SGLang is not one the package was written against."""


def _unsupported(version: str, table: str) -> UnsupportedSGLang:
    return UnsupportedSGLang(
        f"glm53_offload supports SGLang {', '.join(SUPPORTED)}, not {version}: add its row "
        f"to glm53_offload/sglang_support.py {table}"
    )


def installed_version() -> str:
    from sglang.version import __version__

    return __version__


def check(version: Optional[str] = None, import_module=importlib.import_module) -> None:
    """Raise UnsupportedSGLang naming the version or the first missing name."""
    version = version or installed_version()
    uses = USES.get(version)
    if uses is None:
        raise _unsupported(version, "USES once the hooks are re-anchored")
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


def fill_tokenizer_caches(
    tokenizer, version: Optional[str] = None, import_module=importlib.import_module
) -> int:
    """Call this SGLang's per-tokenizer caches (TOKENIZER_CACHES) for `tokenizer`, so no request
    pays for building them; the number filled. A cache that fails to build is logged and left to
    SGLang's first call, as without this."""
    filled = 0
    for module_name, function in TOKENIZER_CACHES.get(version or installed_version(), ()):
        try:
            getattr(import_module(module_name), function)(tokenizer)
            filled += 1
        except Exception:
            logger.warning(
                "%s.%s failed for a preprocessing tokenizer at start-up; its first request "
                "builds it instead",
                module_name,
                function,
                exc_info=True,
            )
    return filled


def stock_converts_off_loop(version: Optional[str] = None) -> bool:
    """STOCK_CONVERTS_OFF_LOOP for this SGLang (or `version`); a version not listed raises
    UnsupportedSGLang, as check() does."""
    version = version or installed_version()
    try:
        return STOCK_CONVERTS_OFF_LOOP[version]
    except KeyError:
        raise _unsupported(version, "STOCK_CONVERTS_OFF_LOOP") from None
