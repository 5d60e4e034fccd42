"""Tests for shm-off-loop.diff.

At dispatch, `TokenizerManager._send_one_request` copies every multimodal feature tensor into its
own /dev/shm segment (`wrap_shm_features` -> `ShmPointerMMData`): ~76 ms per 141 MiB image, seconds
for a many-image request. The patch runs that copy on a dedicated `sglang-mm-shm` worker. A request
cancelled while its copy is still queued never copies; one cancelled mid-copy, whose copy fails, or
whose dispatch fails queues `discard_shm_features` on the same FIFO worker, so every segment is
unlinked once the copy ends; an abort in the copy window cancels the dispatch; shutdown cancels
only queued copies. Requests without multimodal inputs keep the old synchronous path.

The first tests replace the copy and the discard with recording stand-ins; the `real_shm` tests use
real `ShmPointerMMData` segments in /dev/shm and count them before and after (skipped where
/dev/shm has no room).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import pickle
import shutil
import threading
import time
from array import array
from types import SimpleNamespace
from typing import Any, List, Optional, Tuple

import pytest
from conftest import patch_tokenizer_manager_global
import torch

from sglang.srt.managers import mm_utils
from sglang.srt.managers import tokenizer_manager as tokenizer_manager_module
from sglang.srt.managers.io_struct import TokenizedGenerateReqInput
from sglang.srt.managers.schedule_batch import (
    Modality,
    MultimodalDataItem,
    MultimodalInputs,
)
from sglang.srt.observability.req_time_stats import APIServerReqTimeStats
from sglang.srt.sampling.sampling_params import SamplingParams

SHM_WORKER_PREFIX = "sglang-mm-shm"
SHM_DIR = "/dev/shm"
REAL_ITEMS = 16
REAL_ITEM_SHAPE = (9024, 4096)  # float32: 141 MiB, one GLM-5.3 image's features
REAL_ITEM_BYTES = REAL_ITEM_SHAPE[0] * REAL_ITEM_SHAPE[1] * 4


def make_request(rid: str, features: Optional[List[torch.Tensor]]) -> Any:
    """A real TokenizedGenerateReqInput; with `features`, one image item per tensor."""
    mm_inputs = (
        MultimodalInputs(
            mm_items=[
                MultimodalDataItem(modality=Modality.IMAGE, feature=feature)
                for feature in features
            ]
        )
        if features
        else None
    )
    obj = TokenizedGenerateReqInput(
        rid=rid,
        input_text="",
        input_ids=array("i", [1, 2, 3]),
        input_embeds=None,
        mm_inputs=mm_inputs,
        token_type_ids=None,
        sampling_params=SamplingParams(),
        return_logprob=False,
        logprob_start_len=-1,
        top_logprobs_num=0,
        token_ids_logprob=None,
        stream=False,
    )
    obj.time_stats = APIServerReqTimeStats()
    return obj


async def send(tm: Any, obj: Any) -> None:
    """Call `_send_one_request` whether the tree made it a coroutine (patched) or not (stock)."""
    result = tm._send_one_request(obj)
    if inspect.isawaitable(result):
        await result


async def wait_for(predicate: Any, what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        await asyncio.sleep(0.005)


async def drain_shm_worker(tm: Any) -> None:
    """Wait until everything queued on the shm worker so far has run (it is FIFO)."""
    await asyncio.wrap_future(tm.mm_shm_executor.submit(lambda: None))


class CopyStandIns:
    """Replaces the module's `wrap_shm_features` with a held, recording copy and
    `discard_shm_features` with a recording (optionally failing) discard."""

    def __init__(self, hold: Any, discard_error: Optional[Exception] = None) -> None:
        self.hold = hold
        self.discard_error = discard_error
        self.calls: List[Tuple[str, str, float, str]] = []  # (what, thread, time, rid)
        self.unheld: set = set()  # rids whose copy does not wait on the hold

    def wrap(self, obj: Any) -> Any:
        self.calls.append(("wrap", threading.current_thread().name, time.monotonic(), obj.rid))
        if obj.mm_inputs and obj.rid not in self.unheld:  # like the real copy, a no-op without
            self.hold()  # multimodal inputs
        return obj

    def discard(self, obj: Any) -> None:
        self.calls.append(("discard", threading.current_thread().name, time.monotonic(), obj.rid))
        if self.discard_error is not None:
            raise self.discard_error

    def names(self) -> List[str]:
        return [call[0] for call in self.calls]

    def named(self) -> List[Tuple[str, str]]:
        return [(call[0], call[3]) for call in self.calls]


@pytest.fixture
def copy_stand_ins(monkeypatch, hold_factory):
    def install(discard_error: Optional[Exception] = None):
        stand_ins = CopyStandIns(hold_factory(), discard_error)
        patch_tokenizer_manager_global(monkeypatch, "wrap_shm_features", stand_ins.wrap)
        # Only where imported: stock 0.5.19's tokenizer_manager does not import the discard.
        patch_tokenizer_manager_global(monkeypatch, "discard_shm_features", stand_ins.discard)
        return stand_ins

    return install


@pytest.mark.detects_stock_bug
def test_copy_runs_on_the_shm_worker_while_the_loop_runs(make_tokenizer_manager, copy_stand_ins):
    stand_ins = copy_stand_ins()
    tm = make_tokenizer_manager()
    obj = make_request("mm-1", [torch.ones(4)])

    async def scenario():
        releaser = asyncio.create_task(stand_ins.hold.release_when_started())
        await send(tm, obj)
        stand_ins.hold.released.set()
        await releaser

    asyncio.run(scenario())

    hold = stand_ins.hold
    assert hold.released_by_loop, (
        f"the shm copy ran on thread {hold.threads} and was never released by the event loop: "
        f"it held the loop until its {hold.seconds}s limit"
    )
    assert hold.threads[0].startswith(SHM_WORKER_PREFIX), hold.threads
    assert tm.dispatched == [obj], "the request was not dispatched after its copy"


@pytest.mark.detects_stock_bug
def test_cancel_mid_copy_discards_once_after_the_copy_on_the_same_thread(
    make_tokenizer_manager, copy_stand_ins, caplog
):
    caplog.set_level(logging.INFO, logger=tokenizer_manager_module.__name__)
    stand_ins = copy_stand_ins()
    tm = make_tokenizer_manager()
    obj = make_request("mm-cancelled", [torch.ones(4)])

    async def scenario():
        task = asyncio.create_task(send(tm, obj))
        await stand_ins.hold.wait_started()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            cancelled = True
        else:
            cancelled = False
        calls_at_cancel = stand_ins.names()
        stand_ins.hold.released.set()
        if cancelled:
            await drain_shm_worker(tm)  # a second discard would have run by now
        return cancelled, calls_at_cancel

    cancelled, calls_at_cancel = asyncio.run(scenario())

    assert cancelled, (
        f"cancelling the request during its shm copy did not cancel it: the copy ran on "
        f"{stand_ins.hold.threads} and the request was dispatched ({len(tm.dispatched)}) "
        f"before the cancellation could run"
    )
    assert calls_at_cancel == ["wrap"], f"the discard ran before the copy ended: {calls_at_cancel}"
    assert stand_ins.names() == ["wrap", "discard"], stand_ins.calls
    (_, wrap_thread, _, _), (_, discard_thread, discard_at, _) = stand_ins.calls
    assert wrap_thread.startswith(SHM_WORKER_PREFIX), wrap_thread
    assert discard_thread == wrap_thread, stand_ins.calls
    assert discard_at >= stand_ins.hold.ended_at, "the discard started before the copy ended"
    assert tm.dispatched == [], "a cancelled request reached the scheduler"
    outcome = [r for r in caplog.records if "mm-cancelled" in r.getMessage()]
    assert outcome, "the discard's outcome was not logged"


@pytest.mark.detects_stock_bug
def test_failed_discard_is_logged_as_a_warning(make_tokenizer_manager, copy_stand_ins, caplog):
    caplog.set_level(logging.INFO, logger=tokenizer_manager_module.__name__)
    stand_ins = copy_stand_ins(
        discard_error=OSError(13, "Permission denied", "/dev/shm/sgl_shm_mm_x")
    )
    tm = make_tokenizer_manager()
    obj = make_request("mm-unlink-fails", [torch.ones(4)])

    def warnings_about_request() -> List[logging.LogRecord]:
        return [
            r
            for r in caplog.records
            if r.levelno == logging.WARNING and "mm-unlink-fails" in r.getMessage()
        ]

    async def scenario():
        task = asyncio.create_task(send(tm, obj))
        await stand_ins.hold.wait_started()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        stand_ins.hold.released.set()
        if hasattr(tm, "mm_shm_executor"):
            await drain_shm_worker(tm)

    asyncio.run(scenario())

    assert stand_ins.names() == ["wrap", "discard"], (
        f"no discard was queued for the request cancelled mid-copy: {stand_ins.calls}"
    )
    records = warnings_about_request()
    assert records, "the failing discard was not logged as a warning"
    assert records[0].exc_info and records[0].exc_info[1] is stand_ins.discard_error, (
        "the warning does not carry the discard's exception"
    )


def test_requests_without_multimodal_inputs_dispatch_without_suspending(
    make_tokenizer_manager, copy_stand_ins
):
    """Text-only requests take the old path: no thread hop, dispatched within the call, so their
    order relative to each other and to the rest of the loop is what it was."""
    stand_ins = copy_stand_ins()
    tm = make_tokenizer_manager()
    obj = make_request("text-only", None)

    result = tm._send_one_request(obj)
    if inspect.iscoroutine(result):
        with pytest.raises(StopIteration):
            result.send(None)  # runs to completion at once, or this step suspends

    assert tm.dispatched == [obj]
    assert all(call[1] == threading.current_thread().name for call in stand_ins.calls), (
        f"a request without multimodal inputs went through another thread: {stand_ins.calls}"
    )


@pytest.mark.detects_stock_bug
def test_text_requests_are_not_held_behind_a_copy(make_tokenizer_manager, copy_stand_ins):
    stand_ins = copy_stand_ins()
    tm = make_tokenizer_manager()
    image = make_request("image", [torch.ones(4)])
    first, second = make_request("text-1", None), make_request("text-2", None)

    async def scenario():
        copying = asyncio.create_task(send(tm, image))
        await stand_ins.hold.wait_started()
        await send(tm, first)
        await send(tm, second)
        order_during_copy = [o.rid for o in tm.dispatched]
        stand_ins.hold.released.set()
        await copying
        return order_during_copy

    order_during_copy = asyncio.run(scenario())

    assert order_during_copy == ["text-1", "text-2"], (
        f"text requests waited behind a multimodal copy: dispatched {order_during_copy} "
        f"while it ran"
    )
    assert [o.rid for o in tm.dispatched] == ["text-1", "text-2", "image"]


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_request_cancelled_while_its_copy_is_queued_never_copies(
    make_tokenizer_manager, copy_stand_ins
):
    stand_ins = copy_stand_ins()
    tm = make_tokenizer_manager()
    first = make_request("first", [torch.ones(4)])
    second = make_request("queued", [torch.ones(4)])

    async def scenario():
        copying = asyncio.create_task(send(tm, first))
        await stand_ins.hold.wait_started()
        queued = asyncio.create_task(send(tm, second))
        await asyncio.sleep(0)  # let it queue its copy behind the held one
        queued.cancel()
        await asyncio.gather(queued, return_exceptions=True)
        stand_ins.hold.released.set()
        await copying
        await drain_shm_worker(tm)
        return queued.cancelled()

    cancelled = asyncio.run(scenario())

    assert cancelled
    assert ("wrap", "queued") not in stand_ins.named(), (
        f"the copy of a request cancelled while queued still ran: {stand_ins.named()}"
    )
    assert [o.rid for o in tm.dispatched] == ["first"], tm.dispatched


def _abortable(tm: Any, obj: Any, monkeypatch) -> Any:
    """Give `tm` what abort_request and the abort finish read, for `obj`'s rid."""
    from sglang.srt.managers.tokenizer_manager import ReqState

    monkeypatch.setattr(
        tokenizer_manager_module, "get_serving", lambda: SimpleNamespace(tokenizer_worker_num=1,
                                                                         skip_tokenizer_init=False)
    )
    tm.enable_metrics = False
    state = ReqState(
        out_list=[],
        finished=False,
        event=asyncio.Event(),
        obj=SimpleNamespace(stream=False, return_logprob=False),
        time_stats=APIServerReqTimeStats(),
    )
    tm.rid_to_state = {obj.rid: state}
    return state


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_abort_during_the_copy_cancels_the_dispatch(
    make_tokenizer_manager, copy_stand_ins, monkeypatch
):
    """An AbortReq sent before the request would reach the scheduler first, be ignored, and the
    request would then run: an abort in the copy window must keep the request from dispatch and
    finish it as aborted."""
    stand_ins = copy_stand_ins()
    tm = make_tokenizer_manager()
    obj = make_request("aborted-in-copy", [torch.ones(4)])

    async def scenario():
        state = _abortable(tm, obj, monkeypatch)
        task = asyncio.create_task(send(tm, obj))
        await stand_ins.hold.wait_started()
        tm.abort_request(obj.rid)
        stand_ins.hold.released.set()
        await task
        await drain_shm_worker(tm)
        return state

    state = asyncio.run(scenario())

    sent = [type(o).__name__ + ":" + getattr(o, "rid", "") for o in tm.dispatched]
    assert sent == [], f"sent to the scheduler after an abort in the copy window: {sent}"
    assert state.finished and state.out_list, "the aborted request was never finished"
    assert state.out_list[-1]["meta_info"]["finish_reason"]["type"] == "abort"
    assert stand_ins.named() == [("wrap", obj.rid), ("discard", obj.rid)], stand_ins.named()


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_abort_of_a_queued_copy_skips_the_copy(make_tokenizer_manager, copy_stand_ins, monkeypatch):
    stand_ins = copy_stand_ins()
    tm = make_tokenizer_manager()
    first = make_request("first", [torch.ones(4)])
    queued = make_request("aborted-queued", [torch.ones(4)])

    async def scenario():
        state = _abortable(tm, queued, monkeypatch)
        copying = asyncio.create_task(send(tm, first))
        await stand_ins.hold.wait_started()
        task = asyncio.create_task(send(tm, queued))
        await asyncio.sleep(0)
        tm.abort_request(queued.rid)
        stand_ins.hold.released.set()
        await asyncio.gather(copying, task)
        await drain_shm_worker(tm)
        return state

    state = asyncio.run(scenario())

    assert ("wrap", queued.rid) not in stand_ins.named(), stand_ins.named()
    assert [getattr(o, "rid", type(o).__name__) for o in tm.dispatched] == ["first"]
    assert state.finished and state.out_list[-1]["meta_info"]["finish_reason"]["type"] == "abort"


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_submit_after_shutdown_is_a_cancellation(make_tokenizer_manager, copy_stand_ins):
    copy_stand_ins()
    tm = make_tokenizer_manager()
    tm.shutdown_request_preprocessing()

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(send(tm, make_request("late", [torch.ones(4)])))
    assert tm.dispatched == []


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_shutdown_is_idempotent_and_safe_before_init():
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    never_started = object.__new__(TokenizerManager)
    never_started.shutdown_request_preprocessing()
    never_started.shutdown_request_preprocessing()


@pytest.mark.detects_previous_v3
def test_engine_shutdown_keeps_the_original_error_and_runs_every_step(monkeypatch):
    """Engine.shutdown on a manager whose workers never started (it failed during startup):
    the error that stopped the engine propagates, and the feature transport still shuts down."""
    from sglang.srt.entrypoints import engine as engine_module
    from sglang.srt.managers.tokenizer_manager import TokenizerManager

    steps: List[str] = []
    tm = object.__new__(TokenizerManager)
    tm._subprocess_watchdog = None
    tm.cuda_vmm_feature_transport = SimpleNamespace(
        shutdown=lambda: steps.append("cuda_vmm_feature_transport")
    )
    engine = object.__new__(engine_module.Engine)
    engine.tokenizer_manager = tm

    def kill_fails(*args, **kwargs):
        raise ProcessLookupError("the original error")

    monkeypatch.setattr(engine_module, "kill_process_tree", kill_fails)

    with pytest.raises(ProcessLookupError, match="the original error"):
        engine.shutdown()
    assert steps == ["cuda_vmm_feature_transport"], steps

    # A second shutdown (idempotent) behaves the same.
    with pytest.raises(ProcessLookupError):
        engine.shutdown()
    assert steps == ["cuda_vmm_feature_transport"] * 2, steps


# --- real /dev/shm segments -------------------------------------------------------------------


def own_segments() -> set:
    """This process's multimodal segments: their names carry this process's owner token
    (offload_process.segment_owner), or its pid on a tree without owners (stock 0.5.19)."""
    try:
        from glm53_offload.offload_process import segment_owner
    except ImportError:
        return {name for name in os.listdir(SHM_DIR) if f"_mm_{os.getpid()}_" in name}
    prefix = segment_owner().prefix("mm")
    return {name for name in os.listdir(SHM_DIR) if name.startswith(prefix)}


@pytest.fixture
def real_shm(monkeypatch):
    """Real `ShmPointerMMData` segments: needs room in /dev/shm; unlinks anything a failing test
    left behind."""
    if not os.path.isdir(SHM_DIR):
        pytest.skip(f"{SHM_DIR} does not exist on this platform")
    needed = REAL_ITEMS * REAL_ITEM_BYTES + (256 << 20)
    free = shutil.disk_usage(SHM_DIR).free
    if free < needed:
        pytest.skip(
            f"{SHM_DIR} has {free / 2**20:.0f} MiB free; the real-segment test needs "
            f"{needed / 2**20:.0f} MiB ({REAL_ITEMS} x {REAL_ITEM_BYTES / 2**20:.0f} MiB + margin)"
        )
    # The transport decision and the serving flag come from the published server config; pin
    # them to a single-node server with a tokenizer (the shm path).
    monkeypatch.setattr(mm_utils, "_is_default_tensor_transport", False)
    monkeypatch.setattr(
        mm_utils, "get_serving", lambda: SimpleNamespace(skip_tokenizer_init=False)
    )
    before = own_segments()
    yield
    for name in own_segments() - before:
        os.unlink(os.path.join(SHM_DIR, name))


@pytest.fixture(scope="module")
def real_feature() -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    return torch.rand(REAL_ITEM_SHAPE, generator=generator)


def test_real_shm_features_arrive_byte_identical(real_shm, real_feature, make_tokenizer_manager):
    tm = make_tokenizer_manager()
    obj = make_request("real-images", [real_feature] * REAL_ITEMS)
    before = own_segments()

    asyncio.run(send(tm, obj))

    assert tm.dispatched == [obj]
    pointers = [item.feature for item in tm.dispatched[0].mm_inputs.mm_items]
    assert all(isinstance(p, mm_utils.ShmPointerMMData) for p in pointers), pointers
    assert {p.shm_name for p in pointers} <= own_segments() - before
    # What the scheduler does on receipt: unpickle (reopens the segment by name), copy out,
    # unlink.
    for pointer in pointers:
        tensor = pickle.loads(pickle.dumps(pointer)).materialize()
        assert tensor.dtype == real_feature.dtype and tensor.shape == real_feature.shape
        assert torch.equal(tensor, real_feature), f"segment {pointer.shm_name} differs"
        del tensor
    assert own_segments() - before == set(), "materialized segments were not unlinked"


@pytest.mark.detects_stock_bug
def test_real_shm_cancel_mid_copy_leaves_no_segment(
    real_shm, real_feature, make_tokenizer_manager
):
    tm = make_tokenizer_manager()
    obj = make_request("real-images-cancelled", [real_feature] * REAL_ITEMS)
    before = own_segments()

    def created() -> set:
        return own_segments() - before

    def copy_finished_and_discarded() -> bool:
        items = obj.mm_inputs.mm_items
        return all(isinstance(i.feature, mm_utils.ShmPointerMMData) for i in items) and (
            not created()
        )

    async def scenario():
        task = asyncio.create_task(send(tm, obj))
        await wait_for(lambda: created() or task.done(), "the first segment", timeout=30)
        segments_at_cancel = len(created())
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            cancelled = True
        else:
            cancelled = False
        deadline = time.monotonic() + 60
        while cancelled and not copy_finished_and_discarded() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return cancelled, segments_at_cancel

    cancelled, segments_at_cancel = asyncio.run(scenario())

    assert cancelled and segments_at_cancel < REAL_ITEMS, (
        f"the request could not be cancelled mid-copy: the copy ran on the event loop and "
        f"had created {segments_at_cancel} of {REAL_ITEMS} segments (dispatched: "
        f"{len(tm.dispatched)}) before the cancellation ran"
    )
    assert tm.dispatched == []
    wrapped = sum(isinstance(i.feature, mm_utils.ShmPointerMMData) for i in obj.mm_inputs.mm_items)
    assert wrapped == REAL_ITEMS, f"the shielded copy stopped after {wrapped} of {REAL_ITEMS} items"
    assert created() == set(), (
        f"{len(created())} segments left in {SHM_DIR} 60 s after the cancel: {sorted(created())}"
    )


class _FailsAfter:
    """The real per-tensor copy, raising (as torch or the allocator can) on call `n`."""

    def __init__(self, real: Any, n: int) -> None:
        self.real, self.n, self.calls = real, n, 0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == self.n:
            raise RuntimeError("copy failed")
        return self.real(*args, **kwargs)


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_real_shm_failed_copy_leaves_no_segment(
    real_shm, real_feature, make_tokenizer_manager, monkeypatch
):
    failing = _FailsAfter(mm_utils._wrap_shm_or_inline, n=4)
    monkeypatch.setattr(mm_utils, "_wrap_shm_or_inline", failing)
    tm = make_tokenizer_manager()
    obj = make_request("real-copy-fails", [real_feature] * 6)
    before = own_segments()

    async def scenario():
        with pytest.raises(RuntimeError, match="copy failed"):
            await send(tm, obj)
        if hasattr(tm, "mm_shm_executor"):
            await drain_shm_worker(tm)

    asyncio.run(scenario())

    assert failing.calls == 4
    assert tm.dispatched == []
    left = own_segments() - before
    assert left == set(), f"a copy that failed after 3 segments left {len(left)} in {SHM_DIR}"


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_real_shm_failed_dispatch_leaves_no_segment(real_shm, real_feature, make_tokenizer_manager):
    tm = make_tokenizer_manager()

    def dispatch_fails(obj: Any) -> None:
        raise OSError("zmq send failed")

    tm._dispatch_to_scheduler = dispatch_fails
    obj = make_request("real-dispatch-fails", [real_feature] * 4)
    before = own_segments()

    async def scenario():
        with pytest.raises(OSError, match="zmq send failed"):
            await send(tm, obj)
        if hasattr(tm, "mm_shm_executor"):
            await drain_shm_worker(tm)

    asyncio.run(scenario())

    left = own_segments() - before
    assert left == set(), f"a failed dispatch left {len(left)} segments in {SHM_DIR}"


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_real_shm_shutdown_keeps_the_discard_of_a_running_copy(
    real_shm, real_feature, make_tokenizer_manager
):
    """Cancel mid-copy (the discard queues behind the running copy), then shut down at once:
    the discard must still run."""
    tm = make_tokenizer_manager()
    obj = make_request("real-shutdown", [real_feature] * REAL_ITEMS)
    before = own_segments()

    async def scenario():
        task = asyncio.create_task(send(tm, obj))
        await wait_for(lambda: (own_segments() - before) or task.done(), "a segment", timeout=30)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        tm.shutdown_request_preprocessing()
        # The worker is shut down, so wait for its thread to finish its queue.
        for thread in list(tm.mm_shm_executor._threads):
            await asyncio.get_running_loop().run_in_executor(None, thread.join, 60)

    asyncio.run(scenario())

    left = own_segments() - before
    assert left == set(), (
        f"shutdown right after a mid-copy cancel left {len(left)} segments in {SHM_DIR}"
    )
