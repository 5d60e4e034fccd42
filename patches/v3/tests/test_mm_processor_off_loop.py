"""Tests for mm-processor-off-loop.diff.

With one multimodal processor worker (the automatic value on a GPU host with the fast image
processor) 0.5.19 creates no executor and `process_and_combine_mm_data_async` runs the processor
inline on the event loop, with the processor's own tokenizer: the object the loop also uses. The
patch gives that configuration a one-thread `MultimodalProcessorExecutor` (0.5.19's own), whose
worker calls the processor through a deep-copied clone. The tests build a real
`BaseMultimodalProcessor` subclass (only the server-config lookups are pinned) and check where
`process_and_combine_mm_data` runs and with which processor.
"""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any, Dict, List

import pytest

from sglang.srt.multimodal.processors import base_processor

MM_WORKER_PREFIX = "sglang-mm-processor"


class _Config(SimpleNamespace):
    """A server-config section: the values set here, None for the rest."""

    def __getattr__(self, name: str) -> Any:
        return None


@pytest.fixture
def make_processor(monkeypatch, glm_tokenizer, hold_factory):
    mm = _Config(
        media_url_max_file_size_mb=100,
        mm_feature_transport="default",
        image_processor_backend="pil",
        disable_fast_image_processor=True,
        mm_process_config={},
        mm_preprocess_cache_size_mb=0,
        trust_mm_content_hashes=False,
        mm_io_worker_num=1,
        mm_processor_worker_num=1,  # the one-worker configuration
    )
    monkeypatch.setattr(base_processor, "get_mm", lambda: mm)
    monkeypatch.setattr(
        base_processor,
        "get_serving",
        lambda: _Config(skip_tokenizer_init=False, tokenizer_worker_num=1),
    )
    built: List[Any] = []

    def build(concurrency: bool = True):
        hold = hold_factory()
        calls: List[Dict[str, Any]] = []
        hf_processor = SimpleNamespace(tokenizer=glm_tokenizer)

        class Processor(base_processor.BaseMultimodalProcessor):
            supports_mm_processor_concurrency = concurrency

            async def process_mm_data_async(self, *args, **kwargs):
                return await self.process_and_combine_mm_data_async(None, None)

            def process_and_combine_mm_data(self, base_output, mm_tokens, processor=None):
                processor, tokenizer = self._resolve_processor(processor)
                calls.append(
                    {
                        "thread": threading.current_thread().name,
                        "shares_tokenizer": tokenizer is glm_tokenizer,
                    }
                )
                hold()  # stands in for image processing
                return [], [], {}

        processor = Processor(
            SimpleNamespace(),
            SimpleNamespace(rl_on_policy_target=None, base_gpu_id=0),
            hf_processor,
            "default",
        )
        built.append(processor)
        return processor, hold, calls

    yield build

    for processor in built:
        processor.shutdown()


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_one_worker_processes_off_the_loop_with_its_own_tokenizer(make_processor):
    processor, hold, calls = make_processor()

    asyncio.run(hold.run_released_by_loop(processor.process_mm_data_async()))

    assert hold.released_by_loop, (
        f"the multimodal processor ran on thread {hold.threads} and was never released by "
        f"the event loop: it held the loop until its {hold.seconds}s limit"
    )
    assert calls[0]["thread"].startswith(MM_WORKER_PREFIX), calls
    assert not calls[0]["shares_tokenizer"], (
        "the processor worker tokenizes with the object the event loop uses"
    )


def test_a_processor_without_worker_support_stays_inline(make_processor):
    """Processors that opt out of worker threads keep 0.5.19's inline path (and so their
    tokenizer stays on the loop thread alone)."""
    processor, hold, calls = make_processor(concurrency=False)
    hold.released.set()  # inline: nothing on the loop could release it

    asyncio.run(processor.process_mm_data_async())

    assert processor.mm_processor_executor is None
    assert calls == [{"thread": threading.current_thread().name, "shares_tokenizer": True}]
