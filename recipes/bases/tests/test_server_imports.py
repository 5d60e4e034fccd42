"""Runs inside a CPU base image: the SGLang server modules import on CPU.

These are the modules the CPU tests and the lab load (the tokenizer manager, the OpenAI chat
serving layer, the HTTP server); an import that needs a missing package or a CUDA build fails
here, not in the middle of a patch's test.
"""

from __future__ import annotations

import importlib
import os

import pytest

SERVER_MODULES = (
    "sglang.srt.managers.tokenizer_manager",
    "sglang.srt.entrypoints.openai.serving_chat",
    "sglang.srt.entrypoints.http_server",
)


def test_sglang_is_the_expected_release() -> None:
    import sglang

    assert sglang.__version__ == os.environ["GLM53_EXPECT_SGLANG"]


def test_torch_is_the_cpu_build() -> None:
    import torch

    assert torch.__version__.endswith("+cpu"), torch.__version__
    assert not torch.cuda.is_available()


@pytest.mark.parametrize("module", SERVER_MODULES)
def test_server_module_imports(module: str) -> None:
    importlib.import_module(module)
