"""What v3 and v4 add to SGLang's OpenAIServingBase (SGLang 0.5.19, 0.5.23): request conversion on a
preprocessing lane picked by the request body size (http_body.request_body_size), watched for aborts.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from fastapi import Request
from functools import lru_cache, partial
from typing import Optional

from glm53_offload import sglang_support
from glm53_offload.http_body import request_body_size
from sglang.srt.entrypoints.openai.protocol import OpenAIServingRequest

logger = logging.getLogger("sglang.srt.entrypoints.openai.serving_base")


@lru_cache(maxsize=None)
def _warn_without_lanes(manager_type: type, off_loop: bool) -> None:
    logger.warning(
        "%s has no run_request_preprocessing(); request validation, chat-template "
        "rendering and tokenization run %s, as stock SGLang does.",
        manager_type.__qualname__,
        "on the event loop's default executor, with the shared tokenizer"
        if off_loop
        else "on the event loop, which stalls /health on large prompts",
    )


class OpenAIServingBaseHooks:
    """The methods v3 adds to SGLang's OpenAIServingBase."""

    async def _run_preprocessing(
        self, raw_request: Optional[Request], func, /, *args, **kwargs
    ):
        """Run a blocking preprocessing step on the tokenizer manager's worker
        for this request's size. A manager without run_request_preprocessing
        (a test double or another frontend) gets what stock SGLang of this
        version does, after a one-time warning: inline on 0.5.19, on the
        loop's default executor (in the caller's context) on 0.5.23."""
        run = getattr(self.tokenizer_manager, "run_request_preprocessing", None)
        if run is not None:
            return await run(request_body_size(raw_request), func, *args, **kwargs)
        off_loop = sglang_support.stock_converts_off_loop()
        _warn_without_lanes(type(self.tokenizer_manager), off_loop)
        if not off_loop:
            return func(*args, **kwargs)
        step = partial(contextvars.copy_context().run, func, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(None, step)

    async def _run_conversion(self, rid, raw_request, func, /, *args, **kwargs):
        """_run_preprocessing for a step of a request's conversion, with `rid`
        (a string or a batch's list) watched: an abort_request(rid) while the
        step is on its lane finishes the request as aborted, undispatched,
        when generate_request gets it. 0.5.19 converted on the loop, where no
        abort came between the conversion and the dispatch; a manager
        without begin_conversion (0.5.19's) drops such an abort."""
        begin = getattr(self.tokenizer_manager, "begin_conversion", None)
        watched = begin is not None and begin(rid)
        try:
            return await self._run_preprocessing(raw_request, func, *args, **kwargs)
        finally:
            if watched:
                self.tokenizer_manager.end_conversion(rid)

    def _validate_and_convert(self, request: OpenAIServingRequest, raw_request):
        """(error message, None) for an invalid request, else (None, the
        converted request pair)."""
        error_msg = self._validate_request(request)
        if error_msg:
            return error_msg, None

        # Log the raw OpenAI request payload before conversion to tokenized form.
        request_logger = self.tokenizer_manager.request_logger
        if request_logger.log_requests and request_logger.log_requests_level >= 2:
            request_logger.log_openai_received_request(request, request=raw_request)

        return None, self._convert_to_internal_request(request, raw_request)
