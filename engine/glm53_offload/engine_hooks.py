"""What v3 and v4 add to SGLang's Engine (SGLang 0.5.19 and 0.5.23): the shutdown of the tokenizer manager's
preprocessing lanes and children.
"""

from __future__ import annotations

import logging

from sglang.srt.managers.tokenizer_manager import TokenizerManager

logger = logging.getLogger("sglang.srt.entrypoints.engine")


class EngineHooks:
    """The methods v3 adds to SGLang's Engine."""

    def _shutdown_tokenizer_manager_workers(self, reraise: bool) -> None:
        """Stop the tokenizer manager's workers. Every step runs even if one
        before it fails (a half-built manager may lack some); the first failure
        is logged and, with `reraise`, raised once all steps have run."""
        tokenizer_manager = self.tokenizer_manager
        if not isinstance(tokenizer_manager, TokenizerManager):
            return
        steps = (
            (
                "mm_processor.shutdown",
                lambda: getattr(tokenizer_manager, "mm_processor", None)
                and tokenizer_manager.mm_processor.shutdown(),
            ),
            (
                "shutdown_request_preprocessing",
                tokenizer_manager.shutdown_request_preprocessing,
            ),
            (
                "cuda_vmm_feature_transport.shutdown",
                lambda: tokenizer_manager.cuda_vmm_feature_transport.shutdown(),
            ),
        )
        first_error = None
        for name, step in steps:
            try:
                step()
            except Exception as error:
                logger.exception(f"Engine shutdown: {name} failed")
                first_error = first_error or error
        if reraise and first_error is not None:
            raise first_error
