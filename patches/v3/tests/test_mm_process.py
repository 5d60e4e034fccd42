"""Tests for the multimodal processor in child processes (offload-process.diff).

A thread cannot take image work off the event loop: PIL's decoders and the HF processor's
tensor building hold the GIL, and the loop waits for it. The patch runs
`process_mm_data_async` in a pool of children (`MultimodalProcessPool`), each with its own copy
of the server's processor; a child writes the features into /dev/shm segments itself and
answers with their descriptors, so this process never decodes or copies a pixel.

The processor is GLM-5.3's class: sglang's `Glm4vImageProcessor` over transformers'
`Glm4vProcessor` (PIL backend) with the GLM-class tokenizer fixture, built here and saved as a
model directory, so the child is set up exactly as the server sets it up (`publish` of the
server arguments, the processor sent pickled). Images are real PNG and JPEG bytes, as base64
data URLs. Every segment a test could leave is counted in /dev/shm by the pool's name prefix.
"""

from __future__ import annotations

import asyncio
import gc
import os
import pickle
import signal
import zlib
from typing import List

import pytest

import glm_vision as glm_vision_module

SEGMENT_PREFIX = "sgl_shm_mmproc"


def _segments() -> List[str]:
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(SEGMENT_PREFIX))


def _bomb_png(width: int, height: int) -> bytes:
    """A valid PNG header of width x height over a tiny IDAT: a few KB that would decode to
    width * height * 3 bytes."""
    import struct

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 4096)) + chunk(b"IEND", b"")


@pytest.fixture(scope="module")
def glm_vision(tmp_path_factory, glm_tokenizer):
    vision = glm_vision_module.build(tmp_path_factory.mktemp("glm_vision"), glm_tokenizer)
    yield vision
    vision.processor.shutdown()


@pytest.fixture(scope="module")
def pool(glm_vision):
    pool = glm_vision.pool(workers=1, max_queued=1)
    yield pool
    pool.close()


_png, _jpeg = glm_vision_module.noise_png, glm_vision_module.noise_jpeg
_url, _request, _kwargs = glm_vision_module.data_url, glm_vision_module.request, glm_vision_module.mm_kwargs


async def _never_in_process():
    raise AssertionError("the call fell back to in-process processing")


def _discard(output) -> None:
    """Unlinks a pool answer's segments (a test's own cleanup)."""
    from sglang.srt.managers.mm_utils import discard_mm_inputs_shm

    discard_mm_inputs_shm(output)


def _third_is_refused(call, pid: int, error: type):
    """With the pool's one child stopped (`pid`), two calls of `call()` wait (one running, one
    queued) and a third raises `error`; then the child resumes. Returns that exception and the
    two answers."""

    async def three_at_once():
        first, second = asyncio.ensure_future(call()), asyncio.ensure_future(call())
        await asyncio.sleep(0)
        with pytest.raises(error) as refused:
            await call()
        os.kill(pid, signal.SIGCONT)
        return refused.value, [await first, await second]

    return asyncio.run(three_at_once())


def _stats() -> dict:
    from glm53_offload.offload_process import STATS

    return {k.split(".", 1)[1]: v for k, v in STATS.snapshot().items() if k.startswith("mm_process.")}


def _delta(before: dict, event: str) -> int:
    return _stats().get(event, 0) - before.get(event, 0)


def _scheduler_side(pointer):
    """What the scheduler does with a feature: unpickle (maps the segment) and materialize
    (copies it out, unlinks it)."""
    return pickle.loads(pickle.dumps(pointer)).materialize()


IMAGES = {
    "png-640x480": lambda: _url(_png(640, 480, 1)),
    "jpeg-1280x960": lambda: _url(_jpeg(1280, 960, 2), "jpeg"),
    "png-3000x3000-and-jpeg-800x600": lambda: [_url(_png(3000, 3000, 3)), _url(_jpeg(800, 600, 4), "jpeg")],
}


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
@pytest.mark.parametrize("name", sorted(IMAGES))
def test_a_child_produces_the_in_process_features_and_prompt(glm_vision, pool, name):
    import torch

    from sglang.srt.managers.mm_utils import ShmPointerMMData

    processor = glm_vision.processor
    images = IMAGES[name]()
    images = images if isinstance(images, list) else [images]
    obj = _request(images)
    before = _stats()

    expected = asyncio.run(processor.process_mm_data_async(**_kwargs(obj)))
    got = asyncio.run(pool.process(_kwargs(obj), len(images), _never_in_process))

    assert _stats().get("uses", 0) == before.get("uses", 0) + 1
    # Several images are processed one at a time in the child (the in-process reference takes
    # them in one call): the features below must still be the same bytes.
    staged = before.get("images_one_at_a_time", 0) + (len(images) > 1)
    assert _stats().get("images_one_at_a_time", 0) == staged
    # Each image's base64 went to the child from the str's own bytes (no copy holding the GIL).
    from glm53_offload.offload_process import _BIG_STRING_CHARS

    big = sum(len(url) > _BIG_STRING_CHARS for url in images)
    assert big and _delta(before, "strings_zero_copy") == big
    assert _delta(before, "strings_encoded") == 0
    assert got.input_ids == expected.input_ids, "the prompt's token ids differ"
    assert got.input_ids.count(glm_vision.hf_config.image_token_id) > len(images), "placeholders not expanded"
    assert torch.equal(got.mrope_positions, expected.mrope_positions)
    assert len(got.mm_items) == len(expected.mm_items)
    for mine, theirs in zip(got.mm_items, expected.mm_items):
        assert isinstance(mine.feature, ShmPointerMMData), type(mine.feature)
        assert mine.feature.tensor is None, "this process mapped the child's segment"
        assert mine.offsets == theirs.offsets
        assert sorted(mine.model_specific_data) == sorted(theirs.model_specific_data)
        for key, value in theirs.model_specific_data.items():
            assert torch.equal(mine.model_specific_data[key], value), key
        feature = _scheduler_side(mine.feature)
        assert feature.dtype == theirs.feature.dtype and feature.shape == theirs.feature.shape
        assert feature.view(torch.uint8).equal(theirs.feature.contiguous().view(torch.uint8)), (
            "the child's features are not byte-identical to the in-process processor's")
    assert _segments() == [], "the scheduler's materialize left segments"


def _status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_the_childs_peak_grows_by_at_most_one_and_a_half_times_the_features(glm_vision, monkeypatch):
    """In one processor call the child held the per-image arrays, their stacking and the copy
    into segments at once: 2.6x the features (64 x 9 MP peaked at 21.8 GB). Six 4 MP images
    (543 MiB of features) must raise the child's resident peak (VmHWM, reset after the warm-up
    through /proc/PID/clear_refs; the segment pages it maps to write count) by at most 1.5x."""
    import math

    from glm53_offload import offload_process

    # The child is read after the request: it must not be replaced for having grown.
    monkeypatch.setattr(offload_process, "CHILD_GROWTH_LIMIT_MB", 1 << 30)
    images = [_url(glm_vision_module.stripes_png(2000, 2000, seed)) for seed in range(6)]
    pool = glm_vision.pool(workers=1, max_queued=0)
    try:
        _discard(asyncio.run(pool.process(_kwargs(_request(images[:1])), 1, _never_in_process)))
        (child,) = [p for p in pool._processes if not p.closed]
        with open(f"/proc/{child.pid}/clear_refs", "w") as clear_refs:
            clear_refs.write("5")  # VmHWM := VmRSS
        ready_kib = _status_kib(child.pid, "VmHWM")
        before = _stats()
        got = asyncio.run(pool.process(_kwargs(_request(images)), len(images), _never_in_process))
        peak_kib = _status_kib(child.pid, "VmHWM")
        features = sum(math.prod(item.feature.shape) * item.feature.dtype.itemsize
                       for item in got.mm_items)
        _discard(got)
    finally:
        pool.close()
    growth = (peak_kib - ready_kib) * 1024
    print(f"features {features / 2**20:.0f} MiB, child ready {ready_kib / 1024:.0f} MiB, "
          f"peak {peak_kib / 1024:.0f} MiB: growth {growth / features:.2f}x the features")
    assert len(got.mm_items) == len(images)
    assert growth <= 1.5 * features, (
        f"the child's peak grew by {growth / features:.2f}x the features ({features} bytes)")
    assert _stats().get("images_one_at_a_time", 0) == before.get("images_one_at_a_time", 0) + 1


class _FakeImageProcessor:
    """An HF image processor's call shape: pixel values rows per image and a grid per image."""

    merge_size = 2

    def __init__(self, extra_key: bool = False) -> None:
        self.calls: List[int] = []
        self.extra_key = extra_key

    def __call__(self, images, **kwargs):
        import torch
        from transformers import BatchFeature

        self.calls.append(len(images))
        rows = [torch.full((side, 8), float(side)) for side in images]
        data = {"pixel_values": torch.cat(rows),
                "image_grid_thw": torch.tensor([[1, side, 1] for side in images])}
        if self.extra_key:
            data["image_sizes"] = torch.tensor(images)
        return BatchFeature(data)


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_images_staged_one_at_a_time_are_the_one_call_batch_and_give_pages_back():
    import mmap

    import torch

    from glm53_offload import offload_process

    inner = _FakeImageProcessor()
    images = offload_process._ImagesOneAtATime(inner)
    sides = [3 * mmap.PAGESIZE, 5 * mmap.PAGESIZE, 2 * mmap.PAGESIZE]  # rows of 8 floats
    batch = images(sides, return_tensors="pt")
    assert inner.calls == [1, 1, 1], "not one image per call"
    assert images.merge_size == 2, "attributes are not the inner processor's"
    one_call = _FakeImageProcessor()(sides)
    assert torch.equal(batch["pixel_values"], one_call["pixel_values"])
    assert torch.equal(batch["image_grid_thw"], one_call["image_grid_thw"])
    staged = images.staged
    allocated = os.fstat(staged._fd).st_blocks
    first = batch["pixel_values"][: sides[0]]
    staged.release(first)
    assert os.fstat(staged._fd).st_blocks < allocated, "the released rows kept their pages"
    images.done()
    assert images.staged is None


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_an_image_processor_with_other_outputs_runs_in_one_call_and_says_why():
    from glm53_offload import offload_process

    inner = _FakeImageProcessor(extra_key=True)
    images = offload_process._ImagesOneAtATime(inner)
    batch = images([4, 6])
    assert inner.calls == [1, 2], "not retried as one call"
    assert "image_sizes" in batch and images.staged is None
    assert "image_sizes" in images.unstaged


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_this_process_decodes_no_pixel(glm_vision, pool, monkeypatch):
    """While the child processes a 9 MP image, no PIL decode runs in this process."""
    from PIL import ImageFile

    decodes: List[str] = []
    original = ImageFile.ImageFile.load

    def spy(self, *args, **kwargs):
        decodes.append(type(self).__name__)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ImageFile.ImageFile, "load", spy)
    obj = _request([_url(_png(3000, 3000, 5))])
    got = asyncio.run(pool.process(_kwargs(obj), 1, _never_in_process))

    assert decodes == [], f"PIL decoded {decodes} in this process"
    _discard(got)
    assert _segments() == []


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_the_child_runs_nicer_than_this_process(glm_vision, pool):
    """A child decoding images yields the CPU to the server process: its nice value is
    CHILD_NICE above this process's, so a server thread holding the GIL is not preempted by it."""
    from glm53_offload.offload_process import CHILD_NICE

    obj = _request([_url(_png(640, 480, 7))])
    _discard(asyncio.run(pool.process(_kwargs(obj), 1, _never_in_process)))
    (child,) = [p for p in pool._processes if not p.closed]
    mine = os.getpriority(os.PRIO_PROCESS, 0)
    assert CHILD_NICE == 10
    assert os.getpriority(os.PRIO_PROCESS, child.pid) == min(19, mine + CHILD_NICE)


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_corrupt_image_gets_the_in_process_error(glm_vision, pool):
    """A truncated PNG: the child's ValueError is the one the in-process processor raises
    (the server answers 400 with it), and the child stays."""
    processor = glm_vision.processor
    obj = _request([_url(_png(640, 480, 6)[:2000])])
    with pytest.raises(ValueError) as in_process:
        asyncio.run(processor.process_mm_data_async(**_kwargs(obj)))
    before = _stats()
    with pytest.raises(ValueError) as in_child:
        asyncio.run(pool.process(_kwargs(obj), 1, _never_in_process))
    assert str(in_child.value) == str(in_process.value)
    assert _stats().get("restarts", 0) == before.get("restarts", 0)
    assert _segments() == []


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_decompression_bomb_is_a_client_error_not_a_decode(glm_vision, pool):
    """A 5 KB PNG that claims 20,000 x 20,000 pixels (1.2 GB decoded) over the default limit
    (PIL's own, ~179 M pixels): ValueError naming the limit, from the header, in the child
    and in-process alike (0.5.19: RuntimeError, a 500)."""
    bomb = _bomb_png(20_000, 20_000)
    assert len(bomb) < 10_000
    obj = _request([_url(bomb)])
    with pytest.raises(ValueError, match="pixels"):
        asyncio.run(glm_vision.processor.process_mm_data_async(**_kwargs(obj)))
    with pytest.raises(ValueError, match="pixels"):
        asyncio.run(pool.process(_kwargs(obj), 1, _never_in_process))


def _stop_child(pool) -> int:
    """SIGSTOP the pool's one child, once it has served a request (so it is ready)."""
    warm = asyncio.run(pool.process(_kwargs(_request([_url(_png(64, 64, 0))])), 1, _never_in_process))
    _discard(warm)
    processes = [p for p in pool._processes if not p.closed]
    assert len(processes) == 1, processes
    os.kill(processes[0].pid, signal.SIGSTOP)
    return processes[0].pid


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_cancelled_call_leaves_no_segment(glm_vision, pool):
    """The request is cancelled while its child works (stopped, so the child writes its
    segments only after the cancel): they are unlinked when the child answers."""
    obj = _request([_url(_png(1024, 768, 7)), _url(_png(640, 480, 8))])
    pid = _stop_child(pool)

    async def cancel_mid_call():
        task = asyncio.ensure_future(pool.process(_kwargs(obj), 2, _never_in_process))
        await asyncio.sleep(0)  # submitted to the pool's thread
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_mid_call())
    os.kill(pid, signal.SIGCONT)
    # The child answers; the pool's thread then unlinks. A second call on the one-thread
    # pool (queued) runs only after that.
    follow = asyncio.run(pool.process(_kwargs(_request([_url(_png(64, 64, 9))])), 1, _never_in_process))
    _discard(follow)
    assert _segments() == [], "a cancelled request's segments were left in /dev/shm"


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_child_past_its_deadline_is_killed_and_the_request_refused(glm_vision, pool, monkeypatch):
    """The work of a child killed at its deadline would run as long in the server: the request
    is refused (MultimodalRefused, a 503 from the tokenizer manager), never redone here. The
    previous v3 processed it in the server."""
    from glm53_offload import offload_process

    _stop_child(pool)
    for name in ("DEADLINE_BASE_S", "DEADLINE_S_PER_MB", "MM_DEADLINE_S_PER_ITEM"):
        monkeypatch.setattr(offload_process, name, 0.0 if name != "DEADLINE_BASE_S" else 1.0)
    obj = _request([_url(_png(640, 480, 10))])
    before = _stats()

    with pytest.raises(offload_process.MultimodalRefused, match="did not answer within 1.0 s"):
        asyncio.run(pool.process(_kwargs(obj), 1, _never_in_process))
    after = _stats()
    assert after.get("deadline_kills", 0) == before.get("deadline_kills", 0) + 1
    assert after.get("refused", 0) == before.get("refused", 0) + 1
    assert after.get("fallbacks", 0) == before.get("fallbacks", 0)
    assert _segments() == []


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_killed_child_refuses_its_request_and_is_replaced(glm_vision, pool):
    """A child SIGKILLed mid-call (as the OOM killer does; stopped first, so the kill lands
    while it holds the request): the request is refused naming the signal, nothing runs in this
    process, and the next request gets a new child. The previous v3 retried it here, at the
    same memory peak (+1.8 GiB in the server for 4 x 9 MP)."""
    from glm53_offload.offload_process import MultimodalRefused

    obj = _request([_url(_png(640, 480, 11))])
    pid = _stop_child(pool)
    before = _stats()

    async def kill_mid_call():
        call = asyncio.ensure_future(pool.process(_kwargs(obj), 1, _never_in_process))
        await asyncio.sleep(0)  # submitted: the pool's thread writes to the stopped child
        os.kill(pid, signal.SIGKILL)
        return await call

    with pytest.raises(MultimodalRefused, match=r"not retried in the server.*killed by SIGKILL"):
        asyncio.run(kill_mid_call())
    got = asyncio.run(pool.process(_kwargs(obj), 1, _never_in_process))
    after = _stats()
    assert after.get("killed", 0) == before.get("killed", 0) + 1
    assert after.get("refused", 0) == before.get("refused", 0) + 1
    assert after.get("restarts", 0) == before.get("restarts", 0) + 1
    assert after.get("fallbacks", 0) == before.get("fallbacks", 0)
    _discard(got)
    assert _segments() == []


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_full_queue_is_refused(glm_vision, pool):
    """One child, a queue of one: a third request while one runs and one waits raises
    OffloadQueueFull (the tokenizer manager answers 503), counted as rejected."""
    from glm53_offload.offload_process import OffloadQueueFull

    obj = _request([_url(_png(640, 480, 12))])
    pid = _stop_child(pool)
    before = _stats()

    _, answers = _third_is_refused(lambda: pool.process(_kwargs(obj), 1, _never_in_process), pid, OffloadQueueFull)
    for got in answers:
        _discard(got)
    assert _stats().get("rejected", 0) == before.get("rejected", 0) + 1
    assert _segments() == []


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_an_undispatched_request_unlinks_its_segments_when_dropped(glm_vision, pool):
    """A request dropped before dispatch on a path that unlinks nothing itself (a batch whose
    later item failed) still frees its segments; one handed to the scheduler does not."""
    from glm53_offload.offload_process import hand_off_shm_features

    obj = _request([_url(_png(640, 480, 13))])
    dropped = asyncio.run(pool.process(_kwargs(obj), 1, _never_in_process))
    assert len(_segments()) == 1
    del dropped
    gc.collect()
    assert _segments() == []

    kept = asyncio.run(pool.process(_kwargs(obj), 1, _never_in_process))
    pointer = kept.mm_items[0].feature
    hand_off_shm_features(type("Tokenized", (), {"mm_inputs": kept})())
    del kept
    gc.collect()
    assert len(_segments()) == 1, "a dispatched request's segment was unlinked here"
    _scheduler_side(pointer)
    assert _segments() == []


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_close_ends_the_children_and_a_running_call_leaves_nothing(glm_vision):
    processor = glm_vision.processor
    own = glm_vision.pool(workers=1, max_queued=1)
    obj = _request([_url(_png(640, 480, 14))])
    ran_here: List[bool] = []

    async def in_process():
        ran_here.append(True)
        return await processor.process_mm_data_async(**_kwargs(obj))

    async def close_mid_call():
        loop = asyncio.get_running_loop()
        call = asyncio.ensure_future(own.process(_kwargs(obj), 1, in_process))
        await asyncio.sleep(0)
        pids = [p.pid for p in own._processes]
        await loop.run_in_executor(None, own.close)
        return pids, await call

    pids, got = asyncio.run(close_mid_call())
    for pid in pids:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reaped
    assert got.input_ids
    assert _segments() == []


# -- through the tokenizer manager: its real _tokenize_one_request and dispatch ------------------


@pytest.fixture
def mm_dispatching(make_tokenizer_manager, glm_tokenizer, glm_vision, pool, tmp_path, dispatch_helpers):
    """A tokenizer manager with the GLM-V processor and the pool, dispatching on a real ZMQ
    socket (conftest.dispatching_manager), and the scheduler's end of it."""
    tm = make_tokenizer_manager(glm_tokenizer)
    with dispatch_helpers.manager(tm, f"ipc://{tmp_path}/scheduler_input") as scheduler:
        tm.mm_processor = glm_vision.processor
        tm.mm_process_pool = pool
        tm.max_req_input_len = 1 << 20
        yield tm, scheduler, dispatch_helpers.submit_until_dispatch


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_the_tokenizer_manager_dispatches_the_childs_segments(glm_vision, mm_dispatching):
    """generate_request's path for an image request: the features the scheduler reads are the
    child's segments (this process made none) and equal the in-process processor's."""
    import torch

    from sglang.srt.managers.mm_utils import ShmPointerMMData, unwrap_shm_features

    tm, scheduler, submit = mm_dispatching
    obj = _request([_url(_png(1280, 720, 20)), _url(_jpeg(640, 480, 21), "jpeg")])
    expected = asyncio.run(glm_vision.processor.process_mm_data_async(**_kwargs(obj)))
    before = _stats()

    asyncio.run(submit(tm, obj))
    received = scheduler.receive()

    assert received.rid == obj.rid
    assert _stats().get("uses", 0) == before.get("uses", 0) + 1, "the pool did not process the request"
    assert list(received.input_ids) == expected.input_ids
    pointers = [item.feature for item in received.mm_inputs.mm_items]
    assert all(isinstance(p, ShmPointerMMData) for p in pointers), [type(p) for p in pointers]
    assert all(p.shm_name.startswith(SEGMENT_PREFIX) for p in pointers), "segments made in this process"
    unwrap_shm_features(received)
    for mine, theirs in zip(received.mm_inputs.mm_items, expected.mm_items):
        assert mine.feature.view(torch.uint8).equal(theirs.feature.contiguous().view(torch.uint8))
    assert _segments() == []


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_request_rejected_after_its_images_leaves_no_segment(mm_dispatching):
    """The child wrote the segments, then the prompt is too long for the context: the request is
    refused before dispatch and its segments are unlinked here (nothing reaches the scheduler)."""
    tm, scheduler, submit = mm_dispatching
    tm.context_len = 64
    obj = _request([_url(_png(1280, 720, 22))])
    with pytest.raises(ValueError, match="longer than the model's context length|context length"):
        asyncio.run(submit(tm, obj))
    assert not scheduler.pull.poll(100), "a refused request reached the scheduler"
    assert _segments() == [], "a refused request's segments were left in /dev/shm"


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_full_pool_is_a_503_from_the_tokenizer_manager(mm_dispatching, pool):
    import fastapi

    tm, _, _ = mm_dispatching
    obj = _request([_url(_png(640, 480, 23))])
    pid = _stop_child(pool)

    refused, answers = _third_is_refused(lambda: tm._process_mm_data(obj, obj.text), pid, fastapi.HTTPException)
    assert refused.status_code == 503 and "busy" in refused.detail
    for got in answers:
        _discard(got)
    assert _segments() == []


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_the_server_starts_the_pool_for_an_image_processor_on_the_cpu(
        glm_vision, make_tokenizer_manager, glm_tokenizer, monkeypatch, caplog):
    """What TokenizerManager.__init__ runs for a multimodal model on a CPU host with the PIL
    backend: the pool starts. (An earlier v3 took the fast image processor's device, "cpu"
    here, for a GPU and kept every image in the server process: the lab's v3 arm decoded its
    images on the server's threads while every test above, which builds its pool directly,
    passed.)"""
    import logging

    monkeypatch.setenv("SGLANG_MM_PROCESSES", "1")
    caplog.set_level(logging.INFO)
    tm = make_tokenizer_manager(glm_tokenizer)
    tm.mm_processor = glm_vision.processor
    tm.server_args = glm_vision.server_args
    tm.model_config.hf_config = glm_vision.hf_config
    pool = tm._start_mm_process_pool(glm_vision.hf_processor, glm_vision.transport)
    try:
        assert pool is not None, f"the pool did not start: {caplog.text[-500:]}"
        assert pool.workers == 1
        assert "runs in 1 child process" in caplog.text
    finally:
        if pool is not None:
            pool.close()
