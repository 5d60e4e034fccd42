"""Tests for dispatch-off-loop.diff.

After the conversion, 0.5.19 (and the earlier v3 patches) finish a request on the event loop:
`array("q", input_ids)`, the tokenized request object, `list(array)` for return_prompt_token_ids
and the pickling inside `send_pyobj`, together tens of milliseconds for a multi-million-token
prompt. The patch does all of that for a prompt of more than OFF_LOOP_DISPATCH_MIN_IDS ids on the
request's preprocessing lane, in slices, and the loop only sends the bytes. These tests drive the
real `_tokenize_one_request` and `_send_one_request` (real tokenizer, real `sock_send` framing into
a real ZMQ PUSH socket) and read what arrives with the scheduler's own `sock_recv`.

Deterministic hooks, no clock: the ids array is built by the module's `array` (recorded per
thread); the request's sampling params are a `SamplingParams` subclass whose pickling calls a
probe, so the test sees on which thread the request was serialized and can hold or abort it
right there.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import Callable, List, Optional

import pytest
from conftest import patch_tokenizer_manager_global, tokenizer_manager_global

from sglang.srt.managers import io_struct
from sglang.srt.managers.io_struct import GenerateReqInput
from sglang.srt.sampling.sampling_params import SamplingParams

WORKER_PREFIX = "sglang-preprocess"
# ~30 K ids with the GLM-class tokenizer: above the patch's 16 K-id threshold (the prompt sizes of the
# lab are 100 times that; the path is the same).
HUGE_WORDS = 12_000

# Called (on the serializing thread) whenever a request's sampling params are pickled.
_on_pickle: Optional[Callable[[], None]] = None


class ProbedSamplingParams(SamplingParams):
    """SamplingParams whose pickling, which happens exactly when the tokenized request is
    serialized for the scheduler, calls the test's probe first."""

    def __reduce__(self):
        if _on_pickle is not None:
            _on_pickle()
        return super().__reduce__()


@pytest.fixture
def probe():
    def install(func: Callable[[], None]) -> None:
        global _on_pickle
        _on_pickle = func

    yield install
    install(None)


def _huge_text(words: int = HUGE_WORDS) -> str:
    import random

    rng = random.Random(1)
    return " ".join(
        "".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 6))) for _ in range(words)
    )


@pytest.fixture(scope="module")
def huge_text() -> str:
    return _huge_text()


@pytest.fixture
def dispatching(make_tokenizer_manager, glm_tokenizer, tmp_path, dispatch_helpers):
    """A tokenizer manager whose real `_dispatch_to_scheduler` sends on a real ZMQ PUSH socket,
    the scheduler's end of that socket, and `submit_until_dispatch` (conftest.py)."""
    tm = make_tokenizer_manager(glm_tokenizer)
    tm.sampling_params_class = ProbedSamplingParams
    with dispatch_helpers.manager(tm, f"ipc://{tmp_path}/scheduler_input") as scheduler:
        yield tm, scheduler, dispatch_helpers.submit_until_dispatch


def _request(text: str, rid: str) -> GenerateReqInput:
    obj = GenerateReqInput(
        text=text, rid=rid, sampling_params={"max_new_tokens": 1}, return_prompt_token_ids=True
    )
    obj.normalize_batch_and_arguments()
    return obj


def _record_array_threads(monkeypatch) -> List[str]:
    threads: List[str] = []
    real_array = tokenizer_manager_global("array")

    def recording_array(*args):
        threads.append(threading.current_thread().name)
        return real_array(*args)

    patch_tokenizer_manager_global(monkeypatch, "array", recording_array)
    return threads


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_huge_request_is_built_and_serialized_off_the_loop(
    dispatching, huge_text, glm_tokenizer, hold_factory, probe, monkeypatch
):
    """The ids array is built and the request pickled on the lane's worker: the pickling is held
    until a loop task releases it (inline, nothing can, and it runs into its limit). What the
    scheduler reads is the request with the tokenizer's ids; the prompt ids kept for
    return_prompt_token_ids are the same ids."""
    tm, scheduler, submit_until_dispatch = dispatching
    hold = hold_factory()
    probe(hold)
    array_threads = _record_array_threads(monkeypatch)
    obj = _request(huge_text, "huge")

    asyncio.run(hold.run_released_by_loop(submit_until_dispatch(tm, obj)))

    assert hold.released_by_loop, (
        f"the request was serialized on thread {hold.threads} and never released by the event "
        f"loop: it held the loop until its {hold.seconds}s limit"
    )
    assert hold.threads and hold.threads[0].startswith(WORKER_PREFIX), hold.threads
    assert array_threads and all(t.startswith(WORKER_PREFIX) for t in array_threads), (
        f"the ids array was built on {array_threads}"
    )
    expected = glm_tokenizer(huge_text)["input_ids"]
    assert len(expected) > tokenizer_manager_global("OFF_LOOP_DISPATCH_MIN_IDS", 0)
    received = scheduler.receive()
    assert received.rid == "huge"
    assert list(received.input_ids) == expected
    assert tm.rid_to_state["huge"].prompt_token_ids == expected


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_abort_while_the_request_is_serialized_never_sends_it(
    dispatching, huge_text, hold_factory, probe
):
    """abort_request(rid) while the request is being serialized: neither the request nor an
    AbortReq (which would reach the scheduler first and be ignored) is sent; the request ends
    as aborted. The next request is the first thing the scheduler reads."""
    tm, scheduler, submit_until_dispatch = dispatching
    hold = hold_factory()
    probe(hold)
    obj = _request(huge_text, "aborted")

    async def scenario():
        task = asyncio.create_task(submit_until_dispatch(tm, obj))
        await hold.wait_started()
        tm.abort_request("aborted")
        hold.released.set()
        await task
        probe(None)
        await submit_until_dispatch(tm, _request("after", "after"))

    asyncio.run(scenario())

    scheduler.assert_first_is("after", "an AbortReq was sent for a request never sent")
    state = tm.rid_to_state.get("aborted")
    assert state is None or (
        state.finished and state.out_list[-1]["meta_info"]["finish_reason"]["type"] == "abort"
    ), "the aborted request was never finished"


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_abort_between_serialization_and_send_never_sends_it(dispatching, huge_text, probe):
    """The abort is queued on the loop from inside the serialization, so the loop runs it after
    the bytes exist and before the sending step resumes: the bytes are dropped."""
    tm, scheduler, submit_until_dispatch = dispatching
    obj = _request(huge_text, "aborted-late")

    async def scenario():
        loop = asyncio.get_running_loop()
        probe(lambda: loop.call_soon_threadsafe(tm.abort_request, "aborted-late"))
        await submit_until_dispatch(tm, obj)
        probe(None)
        await asyncio.sleep(0)  # on a tree that sent first, the queued abort runs here
        await submit_until_dispatch(tm, _request("after", "after"))

    asyncio.run(scenario())

    scheduler.assert_first_is("after", "the request was sent, then an AbortReq")


def test_huge_requests_reach_the_scheduler_in_submission_order(dispatching, huge_text):
    """Three huge requests at once: their lane is FIFO through tokenization, building and
    serialization, so they arrive in submission order."""
    tm, scheduler, submit_until_dispatch = dispatching
    rids = ["first", "second", "third"]

    async def scenario():
        await asyncio.gather(*(submit_until_dispatch(tm, _request(huge_text, rid)) for rid in rids))

    asyncio.run(scenario())

    assert [scheduler.receive().rid for _ in rids] == rids


@pytest.mark.parametrize("ipc", ["pickle", "msgpack"])
def test_serialized_bytes_read_back_as_the_request(dispatching, huge_text, monkeypatch, ipc):
    """Both IPC encodings (SGLANG_USE_PICKLE_IPC): the scheduler's sock_recv reads the bytes sent
    for a huge request back as the request, and a small one's as before."""
    monkeypatch.setattr(io_struct, "_USE_PICKLE_IPC", ipc == "pickle")
    tm, scheduler, submit_until_dispatch = dispatching
    tm.sampling_params_class = SamplingParams  # msgpack encodes only the declared types

    async def scenario():
        await submit_until_dispatch(tm, _request(huge_text, "huge"))
        await submit_until_dispatch(tm, _request("small prompt", "small"))

    asyncio.run(scenario())

    huge, small = scheduler.receive(), scheduler.receive()
    assert (huge.rid, small.rid) == ("huge", "small")
    assert list(huge.input_ids) == tm.tokenizer(huge_text)["input_ids"]
    assert huge.sampling_params.max_new_tokens == 1
    assert list(small.input_ids) == tm.tokenizer("small prompt")["input_ids"]


@pytest.mark.detects_stock_bug
def test_a_huge_prompt_text_is_pickled_a_slice_at_a_time(monkeypatch):
    """pickle encodes a string to UTF-8 in one GIL-holding call (15 ms for the lab's 4.7 MB chat,
    on the request's lane, while the loop waits). Sliced, no write carries more than one slice of
    the text, and the scheduler's plain pickle.loads reads the same text back."""
    import pickle

    from glm53_offload import sliced_pickle

    text = "naïve café 東京 " * 200_000  # 2.8 M characters, not ASCII
    writes: List[int] = []
    real_write = sliced_pickle._SlicedWriter.write

    def recording_write(self, data):
        writes.append(memoryview(data).nbytes)
        return real_write(self, data)

    monkeypatch.setattr(sliced_pickle._SlicedWriter, "write", recording_write)
    request = io_struct.TokenizedGenerateReqInput(
        rid="huge", input_text=text, input_ids=None, input_embeds=None, mm_inputs=None,
        token_type_ids=None, sampling_params=SamplingParams(max_new_tokens=3), return_logprob=False,
        logprob_start_len=-1, top_logprobs_num=0, token_ids_logprob=None, stream=False)
    encoded = sliced_pickle.sock_encode(request, sliced=True)

    read = pickle.loads(encoded)
    assert type(read) is type(request) and (read.rid, read.input_text) == ("huge", text)
    assert read.sampling_params.max_new_tokens == 3
    assert max(writes) <= 3 * sliced_pickle._ENCODE_SLICE_CHARS, max(writes)


@pytest.mark.detects_previous_v3
def test_a_request_object_without_input_ids_is_dispatched_as_0_5_19(make_tokenizer_manager):
    """0.5.19's _send_one_request never read input_ids; a caller's request object without them
    (upstream's own test doubles) is sent, not failed with an AttributeError."""
    from types import SimpleNamespace

    tm = make_tokenizer_manager()
    stamps = SimpleNamespace(set_api_server_dispatch_time=lambda: None,
                             set_api_server_dispatch_finish_time=lambda: None)
    request = SimpleNamespace(rid="no-ids", mm_inputs=None, time_stats=stamps,
                              wrap_pickle_fields=lambda: None)

    from sglang.srt.runtime_context import get_context

    overrides = get_context().override_server_args()  # what _send_one_request reads
    overrides.install()
    try:
        sent = tm._send_one_request(request)
        if inspect.isawaitable(sent):  # a coroutine since shm-off-loop.diff
            asyncio.run(sent)
    finally:
        overrides.restore()

    assert tm.dispatched == [request]
