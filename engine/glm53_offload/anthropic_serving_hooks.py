"""What v3 and v4 add to SGLang's AnthropicServing (SGLang 0.5.19 and 0.5.23): its request conversion and token
counting on a preprocessing lane, watched for aborts.
"""

from __future__ import annotations

import uuid

from sglang.srt.entrypoints.openai.protocol import ChatCompletionRequest


class AnthropicServingHooks:
    """The methods v3 adds to SGLang's AnthropicServing."""

    async def _run_preprocessing(self, raw_request, func, /, *args):
        """func(*args) on the tokenizer manager's preprocessing lane, through
        the chat serving layer; a chat serving object without
        _run_preprocessing (a subclass or double built on 0.5.19) runs it
        inline, as 0.5.19 did."""
        run = getattr(self.openai_serving_chat, "_run_preprocessing", None)
        if run is None:
            return func(*args)
        return await run(raw_request, func, *args)

    async def _run_conversion(self, chat_request, raw_request, func, /, *args):
        """func(chat_request, *args) as a conversion step of the chat serving
        layer: on its lane, the request's rid watched for aborts (given one
        here, as GenerateReqInput would: a uuid4 hex). A chat serving object
        without _run_conversion (0.5.19's) runs it unwatched."""
        run = getattr(self.openai_serving_chat, "_run_conversion", None)
        if run is None:
            return await self._run_preprocessing(raw_request, func, chat_request, *args)
        if chat_request.rid is None:
            chat_request.rid = uuid.uuid4().hex
        return await run(chat_request.rid, raw_request, func, chat_request, *args)

    def _count_tokens(self, chat_request: ChatCompletionRequest) -> int:
        tokenizer_manager = self.openai_serving_chat.tokenizer_manager
        processed = self.openai_serving_chat._process_messages(
            chat_request, tokenizer_manager.model_config.is_multimodal
        )
        if isinstance(processed.prompt_ids, list):
            return len(processed.prompt_ids)
        # prompt_ids is a string (multimodal case) — tokenize it
        return len(tokenizer_manager.tokenizer.encode(processed.prompt_ids))
