"""PrefillAdder.add_chunked_req never extends a chunk past what the KV pool holds (0.5.23).

0.5.23 keeps the prefill memory accounting in PrefillBudget; the adder asks its
memory_budget.available_chunk_tokens for the next chunk. These tests drive the real
add_chunked_req on a minimal stand-in adder (object.__new__ plus the attributes
add_chunked_req and _update_prefill_budget read) whose memory_budget is the real
PrefillBudget that the base allocator's create_prefill_budget builds for a plain KV
pool, with the pool states recorded when production engines crashed with "Prefill
out of memory".
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import List, Optional

import pytest

from sglang.srt.managers.schedule_policy import PrefillAdder
from sglang.srt.mem_cache.allocator.base import BaseTokenToKVPoolAllocator
from sglang.srt.mem_cache.prefill_budget import PrefillBudget

PAGE = 64
CHUNK = 4096
INPUT_LEN = 142_000
MATCHED = 40_000


@dataclass(frozen=True)
class PoolState:
    name: str
    available: int
    evictable: int
    offset: int  # memory_budget.total_offset: tokens reserved for running requests
    # Expected extend length after the fix; 0 means the chunk is parked.
    expected: int


# Budget (available + evictable - offset) <= 0 in every state below, which is
# where stock falls back to the full chunk.
PRESSURE_STATES: List[PoolState] = [
    PoolState("prod-crash-2368", 2368, 0, 41_000, 2304),
    PoolState("prod-crash-3136", 3136, 0, 41_000, 3072),
    PoolState("prod-crash-3584", 3584, 0, 41_000, 3520),
    PoolState("prod-crash-3904", 3904, 0, 41_000, 3840),
    PoolState("repro-2304-free", 2304, 0, 2328, 2240),
    PoolState("repro-1088-free-2304-evictable", 1088, 2304, 3418, 3328),
    PoolState("exhausted-pool", 32, 0, 4096, 0),
]
HEALTHY = PoolState("healthy", 3136, 900_000, 60_000, CHUNK)


class _Allocator:
    """A plain paged KV pool: what PrefillBudget and add_chunked_req ask of it."""

    page_size = PAGE

    def __init__(self, available: int) -> None:
        self._available = available

    def available_size(self) -> int:
        return self._available

    def request_slot_reserve(self, *, has_req_pool_slot: bool, prefill_tokens: int = 0) -> int:
        return 0


class _TreeCache:
    def __init__(self, evictable: int) -> None:
        self._evictable = evictable

    def supports_mamba(self) -> bool:
        return False

    def evictable_size(self) -> int:
        return self._evictable


@dataclass
class _Req:
    """The fields of Req that add_chunked_req reads and writes."""

    full_untruncated_fill_ids: array = field(default_factory=lambda: array("i", range(INPUT_LEN)))
    # The previous chunk ended where the matched prefix ends.
    prefix_len: int = MATCHED
    extend_end: int = MATCHED
    output_ids: list = field(default_factory=list)
    sampling_params: SimpleNamespace = field(
        default_factory=lambda: SimpleNamespace(max_new_tokens=1024)
    )
    retracted_stain: bool = False
    kv: SimpleNamespace = field(
        default_factory=lambda: SimpleNamespace(holds_mamba=False, req_pool_idx=0)
    )

    @property
    def extend_len(self) -> int:
        return self.extend_end - self.prefix_len


def _adder(state: PoolState) -> PrefillAdder:
    """A PrefillAdder on a plain (non-SWA, non-Mamba, non-dLLM, unsharded) KV pool."""
    allocator = _Allocator(state.available)
    tree_cache = _TreeCache(state.evictable)
    adder = object.__new__(PrefillAdder)
    adder.page_size = PAGE
    adder.rem_chunk_tokens = CHUNK
    adder.rem_input_tokens = 16_384
    adder.chunked_req_limit = None
    adder.token_to_kv_pool_allocator = allocator
    adder.tree_cache = tree_cache
    # The budget a plain pool gets (BaseTokenToKVPoolAllocator.create_prefill_budget).
    adder.memory_budget = BaseTokenToKVPoolAllocator.create_prefill_budget(allocator, tree_cache)
    adder.memory_budget.total_offset = state.offset
    adder.exact_chunk_fill = False
    adder.mamba_chunk_grid = 1
    adder._mamba_slot_cost = 0
    adder.rem_mamba_slots = None
    adder.dllm_config = None
    adder.kv_shard_granule = 0
    adder.kv_shard_scratch_spec = None
    adder.per_req_token_overhead = PAGE
    adder.prefill_delayer_single_pass = None
    adder.running_batch = None
    adder.can_run_list = []
    adder.log_hit_tokens = 0
    adder.log_input_tokens = 0
    adder.log_replay_tokens = 0
    adder.reprocessed_log_hit_tokens = 0
    adder.reprocessed_log_input_tokens = 0
    return adder


def _add(state: PoolState, req: Optional[_Req] = None):
    adder = _adder(state)
    req = req or _Req()
    returned = PrefillAdder.add_chunked_req(adder, req)
    return adder, req, returned, req.extend_len


def test_a_plain_pool_gets_the_single_pool_budget() -> None:
    # Guards the stand-in: the class the patch changes is the one a plain pool uses.
    assert type(_adder(HEALTHY).memory_budget) is PrefillBudget


@pytest.mark.parametrize("state", PRESSURE_STATES, ids=lambda s: s.name)
def test_states_exercise_the_non_positive_budget_branch(state: PoolState) -> None:
    # Guards the table: each state must hit the branch the patch changes.
    assert _adder(state).rem_total_tokens <= 0


@pytest.mark.detects_stock_bug
@pytest.mark.parametrize("state", PRESSURE_STATES, ids=lambda s: s.name)
def test_chunk_fits_in_the_pool_under_pressure(state: PoolState) -> None:
    _, _, _, extend_len = _add(state)
    pool = state.available + state.evictable
    # The pool hands out the extend length plus one page per request.
    assert extend_len == 0 or extend_len + PAGE <= pool, (
        f"{state.name}: extends {extend_len} tokens (+{PAGE} page) "
        f"but the pool holds only {pool}"
    )


@pytest.mark.detects_stock_bug
@pytest.mark.parametrize("state", PRESSURE_STATES, ids=lambda s: s.name)
def test_chunk_is_the_pool_minus_a_page_floored_to_pages(state: PoolState) -> None:
    adder, req, returned, extend_len = _add(state)
    assert extend_len == state.expected
    assert extend_len % PAGE == 0
    # The request is still being prefilled, so it is handed back either way.
    assert returned is req
    if state.expected == 0:
        assert adder.can_run_list == []
        assert adder.rem_chunk_tokens == CHUNK
    else:
        assert adder.can_run_list == [req]
        assert adder.rem_chunk_tokens == CHUNK - state.expected


@pytest.mark.detects_stock_bug
@pytest.mark.parametrize("state", PRESSURE_STATES, ids=lambda s: s.name)
def test_budget_offers_the_pool_minus_a_page_or_parks(state: PoolState) -> None:
    # The method the patch changes, on its own: None is add_chunked_req's "park".
    offered = _adder(state).memory_budget.available_chunk_tokens(CHUNK)
    assert offered == (state.expected or None)


def test_healthy_pool_still_extends_a_full_chunk() -> None:
    adder, req, returned, extend_len = _add(HEALTHY)
    assert _adder(HEALTHY).rem_total_tokens - CHUNK > 0  # budget stayed positive
    assert extend_len == HEALTHY.expected == CHUNK
    assert returned is req and adder.can_run_list == [req]


def test_last_chunk_that_fits_finishes_the_request() -> None:
    # A short remainder on a healthy pool is prefilled whole and not re-chunked.
    req = _Req(full_untruncated_fill_ids=array("i", range(MATCHED + 1000)))
    adder, req, returned, extend_len = _add(HEALTHY, req)
    assert returned is None
    assert (req.prefix_len, req.extend_end) == (MATCHED, MATCHED + 1000)
