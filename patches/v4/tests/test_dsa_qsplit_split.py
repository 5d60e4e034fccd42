"""Query-row split: row partition, gather/pad assembly, and the split method on CPU.

The process group is faked with threads: each simulated rank calls
all_gather_into_tensor, which waits until every rank has contributed, like the
real collective. The deep_gemm kernel and the top-k transform are replaced by
row-wise torch stand-ins (0.5.23 resolves the kernel through
resolve_fp8_mqa_logits_fn and decides chunking in mqa_logits_should_chunk), so the
split method's slicing and assembly run on CPU; the real GPU kernels are not
exercised here.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Callable, List, Optional, Tuple

import pytest
import torch

import sglang.srt.layers.attention.dsa.dsa_indexer as dsa_indexer

pytestmark = pytest.mark.detects_stock_bug  # stock 0.5.23 has no query split

TOPK = 4


class _FakeWorld:
    """A process group of `world_size` ranks that live in threads of one process."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        self.sent: List[Optional[torch.Tensor]] = [None] * world_size
        self._barrier = threading.Barrier(world_size, timeout=30)

    def rank(self, rank: int) -> SimpleNamespace:
        def all_gather_into_tensor(output: torch.Tensor, input: torch.Tensor) -> None:
            self.sent[rank] = input.clone()
            self._barrier.wait()
            shapes = {tuple(t.shape) for t in self.sent}
            dtypes = {t.dtype for t in self.sent}
            assert len(shapes) == 1 and len(dtypes) == 1, (shapes, dtypes)
            output.copy_(torch.cat(self.sent, dim=0))
            self._barrier.wait()

        return SimpleNamespace(
            world_size=self.world_size,
            rank_in_group=rank,
            all_gather_into_tensor=all_gather_into_tensor,
        )

    def run(self, fn: Callable[[SimpleNamespace], torch.Tensor]) -> List[torch.Tensor]:
        with ThreadPoolExecutor(self.world_size) as pool:
            futures = [pool.submit(fn, self.rank(r)) for r in range(self.world_size)]
            return [f.result(timeout=60) for f in futures]


@pytest.mark.parametrize(
    "rows, world, expected",
    [
        (10, 4, [(0, 3), (3, 6), (6, 9), (9, 10)]),  # not divisible
        (8, 4, [(0, 2), (2, 4), (4, 6), (6, 8)]),  # divisible
        (3, 4, [(0, 1), (1, 2), (2, 3), (3, 3)]),  # rows < world
        (1, 8, [(0, 1)] + [(1, 1)] * 7),
        (0, 4, [(0, 0)] * 4),  # no rows
        (5, 1, [(0, 5)]),  # world 1
    ],
)
def test_row_partition(rows: int, world: int, expected: List[Tuple[int, int]]) -> None:
    parts = [dsa_indexer._qsplit_rows(rows, world, r) for r in range(world)]
    per_rank = -(-rows // world)
    assert [p[0] for p in parts] == [per_rank] * world
    assert [(start, end) for _, start, end in parts] == expected


@pytest.mark.parametrize("rows", range(0, 18))
@pytest.mark.parametrize("world", [1, 2, 3, 8])
def test_row_partition_covers_every_row_once(rows: int, world: int) -> None:
    covered: List[int] = []
    for rank in range(world):
        per_rank, start, end = dsa_indexer._qsplit_rows(rows, world, rank)
        assert 0 <= end - start <= per_rank
        covered.extend(range(start, end))
    assert covered == list(range(rows))


def _full_topk(rows: int) -> torch.Tensor:
    return torch.arange(rows * TOPK, dtype=torch.int32).reshape(rows, TOPK)


@pytest.mark.parametrize("rows, world", [(10, 4), (8, 4), (3, 4), (0, 2), (7, 1)])
def test_gather_assembles_rows_in_order_and_pads_with_minus_one(
    rows: int, world: int
) -> None:
    full = _full_topk(rows)
    fake = _FakeWorld(world)

    def rank_fn(group: SimpleNamespace) -> torch.Tensor:
        per_rank, start, end = dsa_indexer._qsplit_rows(
            rows, world, group.rank_in_group
        )
        return dsa_indexer._qsplit_all_gather_topk(
            full[start:end], per_rank, rows, group
        )

    for result in fake.run(rank_fn):
        assert result.dtype == torch.int32
        assert torch.equal(result, full)

    # What each rank sent: its own rows, then -1 up to the per-rank count.
    per_rank = -(-rows // world)
    for rank, sent in enumerate(fake.sent):
        _, start, end = dsa_indexer._qsplit_rows(rows, world, rank)
        assert sent.shape == (per_rank, TOPK) and sent.dtype == torch.int32
        assert torch.equal(sent[: end - start], full[start:end])
        assert bool((sent[end - start :] == -1).all())


def test_gather_rejects_more_rows_than_the_share() -> None:
    group = SimpleNamespace(world_size=2, rank_in_group=0)
    with pytest.raises(AssertionError):
        dsa_indexer._qsplit_all_gather_topk(_full_topk(3), 2, 4, group)


# --- the split method, with CPU stand-ins for the kernels --------------------


def _fake_mqa_logits(q, kv, weights, ks, ke, clean_logits):
    """Row-wise stand-in for deep_gemm.fp8_mqa_logits: keys outside [ks, ke) get -inf."""
    k, k_scale = kv
    scores = torch.einsum("rhd,kd->rhk", q, k).relu()
    logits = (scores * weights[:, :, None]).sum(dim=1) * k_scale[None, :]
    cols = torch.arange(k.shape[0])[None, :]
    return logits.masked_fill((cols < ks[:, None]) | (cols >= ke[:, None]), -torch.inf)


class _Metadata:
    """Stand-in for DSAIndexerMetadata.topk_transform: top-k made relative to ks.

    The per-row offset (RAGGED) or the batch index (PAGED) is added so that a
    mis-sliced argument changes the answer.
    """

    def __init__(
        self, topk_indices_offset: Optional[torch.Tensor], batch_idx: torch.Tensor
    ):
        self.attn_metadata = SimpleNamespace(topk_indices_offset=topk_indices_offset)
        self.batch_idx = batch_idx

    def topk_transform(
        self,
        logits,
        topk,
        ks=None,
        cu_seqlens_q=None,
        ke_offset=None,
        batch_idx_list=None,
        topk_indices_offset_override=None,
    ):
        index = logits.topk(topk, dim=1).indices - ks[:, None]
        index = index.masked_fill(torch.arange(topk)[None, :] >= ke_offset[:, None], -1)
        if topk_indices_offset_override is not None:
            shift = topk_indices_offset_override
        else:
            assert torch.equal(cu_seqlens_q, torch.ones_like(cu_seqlens_q))
            shift = batch_idx_list * 1000
        return (index + shift[:, None]).to(torch.int32)


def _indexer() -> dsa_indexer.Indexer:
    indexer = object.__new__(dsa_indexer.Indexer)
    indexer.index_topk = TOPK
    indexer.logits_with_pp_recv = False
    indexer.num_init_tokens = 0
    indexer.num_local_tokens = 0
    return indexer


def _batch(rows: int, keys: int, heads: int = 32, dim: int = 8):
    gen = torch.Generator().manual_seed(rows * 131 + keys)
    q = torch.randn(rows + 3, heads, dim, generator=gen)  # 3 padded rows
    weights = torch.randn(rows + 3, heads, generator=gen)
    k = torch.randn(keys, dim, generator=gen)
    k_scale = torch.rand(keys, generator=gen) + 0.5
    # Two sequences packed in the key buffer: rows 0..rows/2 see keys [0, keys/2).
    half_rows, half_keys = rows // 2, keys // 2
    ks = torch.tensor(
        [0] * half_rows + [half_keys] * (rows - half_rows), dtype=torch.int32
    )
    lengths = torch.tensor(
        [min(i + 1, half_keys) for i in range(half_rows)]
        + [min(i + 1, keys - half_keys) for i in range(rows - half_rows)],
        dtype=torch.int32,
    )
    ke = ks + lengths
    batch_idx = torch.tensor([0] * half_rows + [1] * (rows - half_rows))
    return q, weights, (k, k_scale), ks, ke, lengths, batch_idx


@pytest.mark.parametrize("chunk_rows", [None, 3], ids=["one-call", "3-row-chunks"])
@pytest.mark.parametrize("ragged", [True, False], ids=["ragged-offsets", "paged-rows"])
@pytest.mark.parametrize("rows, world", [(37, 4), (3, 4), (16, 2)])
def test_split_method_matches_the_unsplit_answer(
    monkeypatch: pytest.MonkeyPatch,
    ragged: bool,
    rows: int,
    world: int,
    chunk_rows: Optional[int],
) -> None:
    monkeypatch.setattr(dsa_indexer, "resolve_fp8_mqa_logits_fn", lambda: _fake_mqa_logits)
    q, weights, kv, ks, ke, lengths, batch_idx = _batch(rows, keys=64)
    offsets = torch.arange(rows, dtype=torch.int32) * 7 if ragged else None
    metadata = _Metadata(offsets, batch_idx)

    # The answer one rank computes for all rows at once.
    logits = _fake_mqa_logits(q[:rows], kv, weights[:rows], ks, ke, False)
    expected = metadata.topk_transform(
        logits,
        TOPK,
        ks=ks,
        cu_seqlens_q=torch.ones(rows, dtype=torch.int32),
        ke_offset=lengths,
        batch_idx_list=batch_idx,
        topk_indices_offset_override=offsets,
    )

    if chunk_rows is not None:
        # Pretend the logits budget fits only `chunk_rows` rows of 64 keys.
        budget = chunk_rows * 64 * dsa_indexer.Indexer._MQA_LOGITS_BYTES_PER_ELEM
        monkeypatch.setattr(
            dsa_indexer, "mqa_logits_should_chunk", lambda **kwargs: (True, budget)
        )

    def rank_fn(group: SimpleNamespace) -> torch.Tensor:
        topk_result = torch.full((rows + 3, TOPK), -1, dtype=torch.int32)
        indexer = _indexer()
        return indexer._get_topk_ragged_qsplit(
            group, q, weights, kv, ks, ke, metadata, lengths, batch_idx, topk_result
        )

    for result in _FakeWorld(world).run(rank_fn):
        assert torch.equal(result[:rows], expected)
        assert bool((result[rows:] == -1).all())  # padded tokens stay -1
