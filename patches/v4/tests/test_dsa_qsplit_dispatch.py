"""Indexer._get_topk_ragged: where the opt-in query-row split may run (0.5.23).

0.5.23 can run prefill inside a CUDA graph, piecewise (PCG) or breakable (BCG);
there the DSA split op (dsa_prefill_cuda_graph.py) calls _get_topk_ragged with a
static, padded topk_result, and the split must stay off. These tests drive the real
_get_topk_ragged up to its dispatch, with the split turned on and a two-rank group,
inside the real PCG/BCG context managers, in capture mode, under prefill context
parallel and off CUDA. The stand-ins end the call at the first step of either
branch: the split method or the unsplit path's chunking decision.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Callable, ContextManager

import pytest
import torch

import sglang.srt.layers.attention.dsa.dsa_indexer as dsa_indexer
from sglang.srt.model_executor.runner_backend_utils.breakable_cuda_graph.context import (
    enable_breakable_cuda_graph,
)
from sglang.srt.model_executor.runner_backend_utils.tc_piecewise_cuda_graph import (
    enable_tc_piecewise_cuda_graph,
)

ROWS, KEYS, HEADS, DIM, TOPK = 8, 16, 4, 8, 4


class _Split(Exception):
    """_get_topk_ragged took the query-row split."""


class _Unsplit(Exception):
    """_get_topk_ragged took the stock (unsplit) path."""


def _unsplit(**kwargs):
    raise _Unsplit()


class _Pool:
    index_page_size = 64

    def get_index_k_scale_buffer(self, layer_id, seq_len, block_tables, seq_len_sum, max_seq_len):
        # fp8 keys and one fp32 scale per key, as raw bytes (the indexer views them).
        return (
            torch.zeros(KEYS, DIM, dtype=torch.uint8),
            torch.zeros(KEYS, 4, dtype=torch.uint8),
        )


class _Metadata:
    attn_metadata = SimpleNamespace(topk_indices_offset=None)

    def get_logical_page_table(self):
        return torch.zeros(1, 1, dtype=torch.int32)

    def get_indexer_kvcache_range(self):
        return torch.zeros(ROWS, dtype=torch.int32), torch.full((ROWS,), KEYS, dtype=torch.int32)

    def get_indexer_seq_len_cpu(self):
        return torch.tensor([KEYS])

    def get_indexer_seq_len(self):
        return torch.tensor([KEYS])

    def get_seqlens_expanded(self):
        return torch.arange(1, ROWS + 1, dtype=torch.int32)

    def get_token_to_batch_idx(self):
        return torch.zeros(ROWS, dtype=torch.int32)


def _forward_batch():
    return SimpleNamespace(
        forward_mode=SimpleNamespace(is_extend_without_speculative=lambda: True),
        seq_lens_cpu=torch.tensor([KEYS]),
        extend_seq_lens_cpu=torch.tensor([ROWS]),
    )


def _indexer(prefill_cp: bool) -> dsa_indexer.Indexer:
    indexer = object.__new__(dsa_indexer.Indexer)
    indexer.index_topk = TOPK
    indexer.dsa_enable_prefill_cp = prefill_cp

    def split(*args):
        raise _Split()

    # An instance attribute, so the stock tree (which has no such method) runs too.
    indexer._get_topk_ragged_qsplit = split
    return indexer


@pytest.fixture
def split_on(monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    """Split on for every row count, a two-rank group, eager CUDA; returns a runner."""
    group = SimpleNamespace(world_size=2, rank_in_group=0)
    monkeypatch.setattr(dsa_indexer, "_is_cuda", True)
    monkeypatch.setattr(dsa_indexer, "_QSPLIT", True, raising=False)
    monkeypatch.setattr(dsa_indexer, "_QSPLIT_MIN_ROWS", 1, raising=False)
    monkeypatch.setattr(dsa_indexer, "get_parallel", lambda: SimpleNamespace(attn_tp_group=group))
    monkeypatch.setattr(dsa_indexer, "get_token_to_kv_pool", lambda: _Pool())
    monkeypatch.setattr(dsa_indexer, "mqa_logits_should_chunk", _unsplit)

    def run(prefill_cp: bool = False, context: ContextManager = contextlib.nullcontext()) -> str:
        # q only needs its shape and an indexed device before the dispatch.
        q_fp8 = SimpleNamespace(shape=(ROWS, HEADS, DIM), device=SimpleNamespace(index=0))
        weights = torch.zeros(ROWS, HEADS, 1)
        topk_result = torch.full((ROWS, TOPK), -1, dtype=torch.int32)
        with context:
            try:
                _indexer(prefill_cp)._get_topk_ragged(
                    False, _forward_batch(), 0, q_fp8, weights, _Metadata(), topk_result
                )
            except _Split:
                return "split"
            except _Unsplit:
                return "unsplit"
        raise AssertionError("_get_topk_ragged returned before its dispatch")

    return run


@pytest.mark.detects_stock_bug
def test_eager_cuda_prefill_is_split(split_on: Callable[..., str]) -> None:
    assert split_on() == "split"


def test_not_split_inside_the_piecewise_prefill_cuda_graph(split_on: Callable[..., str]) -> None:
    assert split_on(context=enable_tc_piecewise_cuda_graph()) == "unsplit"


def test_not_split_inside_the_breakable_prefill_cuda_graph(split_on: Callable[..., str]) -> None:
    assert split_on(context=enable_breakable_cuda_graph()) == "unsplit"


def test_not_split_while_a_cuda_graph_is_captured(
    split_on: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dsa_indexer, "get_is_capture_mode", lambda: True)
    assert split_on() == "unsplit"


def test_not_split_under_prefill_context_parallel(split_on: Callable[..., str]) -> None:
    assert split_on(prefill_cp=True) == "unsplit"


def test_not_split_off_cuda(split_on: Callable[..., str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dsa_indexer, "_is_cuda", False)
    assert split_on() == "unsplit"


@pytest.mark.detects_stock_bug
def test_split_again_once_the_graph_context_is_left(split_on: Callable[..., str]) -> None:
    # The PCG/BCG flags are scoped: the next eager prefill splits again.
    assert split_on(context=enable_tc_piecewise_cuda_graph()) == "unsplit"
    assert split_on(context=enable_breakable_cuda_graph()) == "unsplit"
    assert split_on() == "split"
