"""What v3 (SGLang 0.5.19) and v4 (0.5.23) add to SGLang's TokenizerManager, as a mixin.

TokenizerManager (sglang/srt/managers/tokenizer_manager.py) lists OffloadTokenizerManagerMixin
among its bases and imports the module-level names its own patched methods use; the methods
here are new (none overrides one of SGLang's), so the patched file keeps only the hook lines:
the calls into these methods inside SGLang's own methods. Request preprocessing lanes, the
tokenizer and multimodal children, the abort watch of a conversion, the off-loop dispatch and
the shared-memory hand-off live here.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import ctypes
import dataclasses
import fastapi
import logging
import os
import sys
import threading
import time
from array import array
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Dict, List, Optional, Tuple, Union

from glm53_offload import sglang_support
from glm53_offload.offload_process import (
    backend_setup,
    child_processes,
    ChildDeadlineError,
    ChildReportedError,
    ChildStartError,
    env_number,
    mm_setup,
    MultimodalProcessPool,
    MultimodalRefused,
    OffloadQueueFull,
    plain_fast_tokenizer,
    segment_owner,
    STATS as OFFLOAD_STATS,
    TokenizerProcess,
    TokenizerProcessMismatch,
    uses_shm_features,
)
from glm53_offload.sliced_pickle import sock_encode
from sglang.srt.managers.io_struct import (
    TokenizedEmbeddingReqInput,
    TokenizedGenerateReqInput,
)
from sglang.srt.managers.mm_utils import (
    discard_mm_inputs_shm,
    discard_shm_features,
    wrap_shm_features,
)

logger = logging.getLogger("sglang.srt.managers.tokenizer_manager")


# Requests up to this size (HTTP body bytes or prompt characters) are
# preprocessed on the small-request lane: a 64 KiB prompt converts in tens of
# milliseconds, so small chats keep a short queue while a multi-MB one converts.
SMALL_REQUEST_MAX_BYTES = 64 * 1024


# A request with more prompt ids than this is finished for dispatch on a
# worker: the ids array, the tokenized request object (stop-string encodes
# included) and its serialization take tens of milliseconds for millions of
# ids. Below it they take well under a millisecond and stay inline, so a
# small request is dispatched within the calling step of the loop.
OFF_LOOP_DISPATCH_MIN_IDS = 16 * 1024


# Ids per step when a worker copies a large prompt into an array or a list:
# each step is one short native call, so the loop thread can take the GIL
# between steps instead of waiting for one multi-million-id copy.
IDS_SLICE = 64 * 1024


# A prompt longer than this (characters) is encoded by its lane's tokenizer
# process: the lane thread then only waits on a pipe, where an in-process
# encode of millions of ids holds the GIL for hundreds of milliseconds while
# `tokenizers` builds the Python lists. Below it that tail is a few ms and
# the pipe round trip would cost more than it saves.
TOKENIZER_PROCESS_MIN_CHARS = 256 * 1024


# Bytes per prompt id, to place a request known only by its ids on a lane
# (SMALL_REQUEST_MAX_BYTES is a size in bytes, not in ids).
_BYTES_PER_ID = 4


# The rids whose serving-layer conversion was aborted (end_conversion), read
# by generate_request in the same request task (or one it starts).
_ABORTED_IN_CONVERSION: contextvars.ContextVar = contextvars.ContextVar(
    "sglang_aborted_in_conversion", default=frozenset()
)


# Set in a request's task by its first preprocessing step: the lane counts
# the request once ("uses"), each of its steps as "steps".
_LANE_REQUEST_COUNTED: contextvars.ContextVar = contextvars.ContextVar(
    "sglang_lane_request_counted", default=False
)


def _drop_ids(held: list) -> int:
    """Free the ids list in `held` (its only reference) IDS_SLICE ids at a
    time, the GIL offered between slices; a list someone else still holds
    is left whole. Returns how many ids were freed here."""
    ids = held.pop()
    # 2: `ids` and getrefcount's argument.
    if type(ids) is not list or sys.getrefcount(ids) > 2:
        return 0
    freed = len(ids)
    while ids:
        del ids[-IDS_SLICE:]
        time.sleep(0)
    return freed


def _watchable_rids(rid) -> Tuple[str, ...]:
    """The rids begin_conversion watches: a string, or a batch's strings."""
    if isinstance(rid, str):
        return (rid,)
    if isinstance(rid, (list, tuple)) and all(isinstance(r, str) for r in rid):
        return tuple(rid)
    return ()


def _ids_in_slices(ids, make):
    """make(ids) (array("q", ...) or list), built IDS_SLICE ids at a time
    with the GIL offered to other threads between the slices. A list this
    builds is untracked by the cycle collector (_untrack_ids)."""
    if not isinstance(ids, (list, array)) or len(ids) <= IDS_SLICE:
        return make(ids)
    out = make(ids[:IDS_SLICE])
    for start in range(IDS_SLICE, len(ids), IDS_SLICE):
        time.sleep(0)  # releases the GIL: a waiting loop thread runs now
        out.extend(ids[start : start + IDS_SLICE])
    if type(out) is list:
        _untrack_ids(out)
    return out


try:
    _GC_UNTRACK = ctypes.pythonapi.PyObject_GC_UnTrack
    _GC_UNTRACK.argtypes, _GC_UNTRACK.restype = [ctypes.py_object], None
except AttributeError:  # not CPython
    _GC_UNTRACK = None


def _backend_decode_refused(tokenizer) -> Optional[str]:
    """Why decode_prompt cannot call the Rust backend's decode_batch for
    `tokenizer` and get decode's text (None: it can)."""
    kind = type(tokenizer)
    if not hasattr(getattr(tokenizer, "_tokenizer", None), "decode_batch"):
        return "the tokenizer has no Rust backend"
    if "decode" in vars(tokenizer) or not all(
        getattr(getattr(kind, name, None), "__module__", "").startswith("transformers.")
        for name in ("decode", "_decode")
    ):
        return f"{kind.__name__} decodes in its own way"
    if getattr(tokenizer, "clean_up_tokenization_spaces", False):
        return "the tokenizer cleans up spaces after decoding"
    return None


def _untrack_ids(ids: list) -> None:
    """Take a list of ints out of the cycle collector's view. Every
    collection of a generation that holds a tracked list walks all of its
    items with the GIL held, on whichever thread allocated next (often the
    event loop): a 1.5 M-id prompt list cost 11.5 ms in a gen0 collection and
    6.5 ms in a gen1 one (measured in the v3 image). A list of ints is in no
    reference cycle; refcounting still frees it."""
    if _GC_UNTRACK is None:
        OFFLOAD_STATS.slow_path(
            "ids_lists", "tracked", "this Python has no PyObject_GC_UnTrack"
        )
        return
    _GC_UNTRACK(ids)
    OFFLOAD_STATS.count("ids_lists", "untracked")


@dataclasses.dataclass
class _PendingDispatch:
    """A request's off-loop dispatch step (its /dev/shm feature copy or its
    serialization) between submission and dispatch."""

    future: Future
    aborted: bool = False


class OffloadTokenizerManagerMixin:
    """The methods v3 adds to TokenizerManager (see the module docstring)."""

    def _start_mm_process_pool(self, hf_processor, transport_mode):
        """The multimodal processor in child processes, or None (the reason
        logged) where its features cannot travel through /dev/shm segments
        the children write: PIL decoders and the processor's tensor building
        hold the GIL, so on any thread of this process they stall the loop."""
        # Claims this server's segment names, after unlinking the segments a
        # killed server left (ipc: host keeps them past its container).
        segment_owner()
        workers = child_processes("SGLANG_MM_PROCESSES", min(2, os.cpu_count() or 1))
        mm_processor = self.mm_processor
        why = None
        if workers <= 0:
            why = "SGLANG_MM_PROCESSES is 0 (its default outside the HTTP server)"
        elif not uses_shm_features():
            why = "features are not sent through shared memory here"
        elif (
            mm_processor.mm_feature_transport != "cpu"
            or mm_processor.keep_mm_features_on_device
        ):
            why = "features stay on the GPU"
        elif mm_processor.image_processor_device(hf_processor) not in (None, "cpu"):
            why = "the image processor runs on the GPU"
        if why is None:
            try:
                setup = mm_setup(
                    mm_processor,
                    self.server_args,
                    self.model_config.hf_config,
                    hf_processor,
                    transport_mode,
                )
            except Exception as error:
                why = f"the processor cannot be sent to a child: {error!r}"
        if why is not None:
            logger.info("Multimodal processing stays in this process (%s).", why)
            return None
        pool = MultimodalProcessPool(
            setup, workers, int(env_number("SGLANG_MM_PROCESS_MAX_QUEUED", 16))
        )
        pool.prestart()
        logger.info(
            "Multimodal processing runs in %d child process(es) "
            "(SGLANG_MM_PROCESSES), at most %d requests queued.",
            pool.workers,
            pool.max_queued,
        )
        return pool

    async def _process_mm_data(self, obj, mm_processor_input):
        """process_mm_data_async for the request: in a child process when the
        pool runs (features written to /dev/shm by the child), else here."""
        kwargs = dict(
            image_data=obj.image_data,
            audio_data=obj.audio_data,
            input_text=mm_processor_input,
            request_obj=obj,
            max_req_input_len=self.max_req_input_len,
        )

        def in_process():
            return self.mm_processor.process_mm_data_async(**kwargs)

        pool = self.__dict__.get("mm_process_pool")
        if pool is None:
            return await in_process()
        if getattr(obj, "parallel_sample_num", 1) > 1:
            # Each of the n copies is dispatched with its own segments, made
            # from the tensors here at dispatch; a child's segment goes once.
            OFFLOAD_STATS.count(pool.PATH, "bypassed")
            return await in_process()
        items = sum(
            len(data) if isinstance(data, list) else 1
            for data in (obj.image_data, obj.video_data, obj.audio_data)
            if data
        )
        try:
            return await pool.process(kwargs, items, in_process)
        except OffloadQueueFull as error:
            raise fastapi.HTTPException(
                status_code=503, detail=f"server busy processing images: {error}"
            ) from None
        except MultimodalRefused as error:
            raise fastapi.HTTPException(status_code=503, detail=str(error)) from None

    def init_request_preprocessing(self):
        # Chat-template rendering and tokenization are synchronous and take
        # seconds on multi-MB prompts; on the event loop they stall every
        # other endpoint, /health included. They run on two single-thread
        # lanes instead, each owning a private copy of the tokenizer: HF fast
        # tokenizers are not thread-safe (a padding or truncation change while
        # another thread encodes raises "Already borrowed"), and the loop keeps
        # using the original (stop strings, logprob decodes, the inline
        # multimodal processor). The copies are taken here, on the thread that
        # builds the manager, before any worker or request exists.
        self._preprocessing_thread = threading.local()
        self._preprocessing_lanes: Optional[Dict[str, ThreadPoolExecutor]] = None
        self._preprocessing_shut_down = False
        # Copying multimodal features into /dev/shm at dispatch takes seconds
        # for a many-image request: its own worker keeps it off the loop and
        # out of the tokenization queue. Copies and discards share this FIFO
        # worker, so a discard always runs after the copy it cleans up.
        self.mm_shm_executor = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="sglang-mm-shm"
        )
        # rid -> its off-loop dispatch step, from submission to dispatch (the
        # abort window).
        self._pending_dispatches: Dict[str, _PendingDispatch] = {}
        # The "fake" disaggregation backend numbers bootstrap rooms while the
        # request object is built, which now happens on either lane.
        self._bootstrap_room_lock = threading.Lock()
        # Every lane's tokenizer process, for shutdown (see encode_prompt);
        # none when SGLANG_TOKENIZER_PROCESSES is 0 (its default outside the
        # HTTP server): large prompts are then encoded on the lanes.
        self._tokenizer_processes_on = (
            child_processes("SGLANG_TOKENIZER_PROCESSES", 1, maximum=1) > 0
        )
        self._tokenizer_processes: List[TokenizerProcess] = []
        self._tokenizer_processes_lock = threading.Lock()
        # The backend JSON every tokenizer process starts from, made once.
        self._tokenizer_process_setup = None
        self._tokenizer_process_setup_lock = threading.Lock()
        # rid -> aborted, for a request between _init_req_state and its
        # dispatch, or in a serving layer's conversion (see abort_request).
        self._undispatched: Dict[str, bool] = {}
        # rids aborted during a serving layer's conversion, oldest first.
        self._aborted_in_conversion: Dict[str, None] = {}
        try:
            copies = {
                lane: copy.deepcopy(self._tokenizer) for lane in ("bulk", "small")
            }
        except Exception:
            logger.warning(
                "The tokenizer cannot be copied for the preprocessing workers; "
                "request preprocessing runs on the event loop.",
                exc_info=True,
            )
            return
        for tokenizer_copy in copies.values():
            sglang_support.fill_tokenizer_caches(tokenizer_copy)
        # A small request goes to its own lane, so it never waits behind a
        # multi-MB conversion; each lane is FIFO. The threads start on first use.
        self._preprocessing_lanes = {
            lane: ThreadPoolExecutor(
                max_workers=1,
                thread_name_prefix=(
                    "sglang-preprocess" if lane == "bulk" else "sglang-preprocess-small"
                ),
                initializer=self._adopt_preprocessing_tokenizer,
                initargs=(tokenizer_copy, lane),
            )
            for lane, tokenizer_copy in copies.items()
        }
        # Multi-MB prompts go to the bulk lane: its tokenizer process starts
        # now, not on the first one (serializing the backend holds the GIL for
        # 100-300 ms; a request would see it as a stall).
        if self._tokenizer_processes_on:
            self._preprocessing_lanes["bulk"].submit(self._start_lane_tokenizer_process)

    def _adopt_preprocessing_tokenizer(self, tokenizer, lane: str = "bulk") -> None:
        self._preprocessing_thread.tokenizer = tokenizer
        self._preprocessing_thread.name = lane

    @property
    def tokenizer(self):
        """The tokenizer owned by the calling thread: a preprocessing worker's
        private copy on that worker, the original everywhere else."""
        worker = self.__dict__.get("_preprocessing_thread")
        if worker is not None and hasattr(worker, "tokenizer"):
            return worker.tokenizer
        return self.__dict__.get("_tokenizer")

    @tokenizer.setter
    def tokenizer(self, value) -> None:
        self._tokenizer = value

    def encode_prompt(self, text: str, fallback=None, **kwargs) -> List[int]:
        """self.tokenizer.encode(text, **kwargs); a large prompt on a
        preprocessing lane is encoded by the lane's tokenizer process.
        `fallback(tokenizer, text, kwargs)`, if given, encodes what stays here
        (0.5.23's chat path: parallel_prompt_encode). An error it raises is
        marked `encode_error`: 0.5.23's chat conversion, which renders and
        encodes in one call, retries only a failed render with flat tools."""
        try:
            ids = self._encode_in_lane_process(text, **kwargs)
            if ids is None:
                if fallback is not None:
                    return fallback(self.tokenizer, text, kwargs)
                ids = self.tokenizer.encode(text, **kwargs)
        except Exception as error:
            try:
                error.encode_error = True
            except AttributeError:
                pass
            raise
        return ids

    def decode_prompt(self, ids: List[int]) -> str:
        """self.tokenizer.decode(ids), as 0.5.23's chat path calls it to cache a
        multimodal prompt's text (on a lane), with the GIL released for the
        decode: transformers' decode holds it for the whole Rust call (76,726
        ids: 27 ms in the v4 image, another thread's worst gap 27 ms); the Rust
        backend's decode_batch releases it (29 ms, worst gap 2.0 ms). The same
        text where decode is transformers' own and adds no space clean-up;
        otherwise decode itself, counted and logged once."""
        tokenizer = self.tokenizer
        reason = _backend_decode_refused(tokenizer)
        if reason is not None:
            OFFLOAD_STATS.slow_path("prompt_decode", "gil_held", reason)
            return tokenizer.decode(ids)
        text = tokenizer._tokenizer.decode_batch([ids], skip_special_tokens=False)[0]
        OFFLOAD_STATS.count("prompt_decode", "gil_free")
        return text

    def _encode_in_lane_process(
        self, text: str, add_special_tokens: bool = True, **kwargs
    ) -> Optional[List[int]]:
        """The ids of a text of more than TOKENIZER_PROCESS_MIN_CHARS, encoded
        by the calling lane's tokenizer process (the same ids: it holds the
        backend of the lane's tokenizer), so no thread of this process holds
        the GIL while millions of ids become a list. None where the caller
        must encode itself: off the lanes, a short text, other encode
        arguments, or a failed process (logged; the next large prompt starts
        a new one)."""
        if kwargs or len(text) <= TOKENIZER_PROCESS_MIN_CHARS:
            return None
        if not self.__dict__.get("_tokenizer_processes_on"):
            return None  # switched off: the lane encodes, as 0.5.19 does
        path = TokenizerProcess.PATH
        lane = self.__dict__.get("_preprocessing_thread")
        if lane is None or getattr(lane, "tokenizer", None) is not self.tokenizer:
            return None  # off the lanes: the caller encodes, as 0.5.19
        process = self._lane_tokenizer_process(self.tokenizer)
        if process is None:
            why, error = getattr(lane, "tokenizer_process_off", None) or ("start failed", None)
            OFFLOAD_STATS.fallback(path, why, error)
            return None
        try:
            ids = process.encode(text, add_special_tokens)
        except UnicodeEncodeError:
            return None  # the tokenizer's own encode reports it, as in 0.5.19
        except ChildDeadlineError as error:  # killed: this prompt is encoded here
            OFFLOAD_STATS.count(path, "deadline_kills")
            OFFLOAD_STATS.fallback(path, "deadline", error)
            return None
        except ChildReportedError as error:  # the child is still in step: it stays
            OFFLOAD_STATS.fallback(path, "child error", error)
            return None
        except Exception as error:  # the child failed: this prompt is encoded here
            process.kill()
            OFFLOAD_STATS.fallback(path, "child failed", error)
            return None
        OFFLOAD_STATS.count(path, "uses")
        if process.grown():
            # Replaced now, on this lane (FIFO: after this request), so the
            # idle child holds nothing of this prompt.
            OFFLOAD_STATS.count(path, "recycles")
            process.close()
            lane.tokenizer_process = None
            try:
                self._preprocessing_lanes[lane.name].submit(
                    self._start_lane_tokenizer_process
                )
            except RuntimeError:
                pass  # shut down: no replacement
        return _ids_in_slices(ids, list)

    def _start_lane_tokenizer_process(self) -> None:
        """Run on a lane: start its tokenizer process ahead of the next large
        prompt (serializing and loading a GLM-size backend takes a while)."""
        self._lane_tokenizer_process(self.tokenizer)

    def _lane_tokenizer_process(self, tokenizer) -> Optional[TokenizerProcess]:
        """The calling lane's tokenizer process, started on first use; None
        off the lanes, or once the lane's process is off for good
        (_lane_process_off: cannot start, encodes differently, a tokenizer
        with its own encode, shut down)."""
        lane = self.__dict__.get("_preprocessing_thread")
        if lane is None or getattr(lane, "tokenizer", None) is not tokenizer:
            return None
        process = getattr(lane, "tokenizer_process", None)
        if process is not None and not process.closed:
            return process
        if getattr(lane, "tokenizer_process_off", None):
            return None
        if self._preprocessing_shut_down:
            return self._lane_process_off(lane, "shut down")
        if not plain_fast_tokenizer(tokenizer):
            return self._lane_process_off(lane, "tokenizer with its own encode")
        if process is not None:
            OFFLOAD_STATS.count(TokenizerProcess.PATH, "restarts")
        # Started with no lock held: a slow or hung start (bounded by
        # START_DEADLINE_S) blocks only this lane.
        try:
            process = TokenizerProcess(tokenizer, self._backend_setup(tokenizer))
        except Exception as error:  # ChildStartError, or a backend that cannot serialize
            OFFLOAD_STATS.count(TokenizerProcess.PATH, "start_failures")
            return self._lane_process_off(lane, "cannot start", error)
        with self._tokenizer_processes_lock:
            self._tokenizer_processes = [
                p for p in self._tokenizer_processes if not p.closed
            ]
            self._tokenizer_processes.append(process)
        lane.tokenizer_process = process
        try:
            process.check_against(tokenizer)
        except TokenizerProcessMismatch as error:
            return self._lane_process_off(lane, "encodes differently", error)
        except ChildStartError as error:
            OFFLOAD_STATS.count(TokenizerProcess.PATH, "start_failures")
            return self._lane_process_off(lane, "cannot start", error)
        except ChildDeadlineError as error:  # the next large prompt tries a new one
            OFFLOAD_STATS.count(TokenizerProcess.PATH, "deadline_kills")
            logger.warning("Tokenizer process missed its probe's deadline: %s", error)
            return None
        except Exception as error:  # it failed the probe: the next large prompt tries a new one
            logger.warning("Tokenizer process failed its probe: %r", error)
            process.kill()
            return None
        if self._preprocessing_shut_down:  # shut down while it started
            process.close()
            return None
        return process

    def _backend_setup(self, tokenizer):
        """The tokenizer processes' setup frames, made once (every lane's
        copy has the same backend)."""
        with self._tokenizer_process_setup_lock:
            if self._tokenizer_process_setup is None:
                self._tokenizer_process_setup = backend_setup(tokenizer)
            return self._tokenizer_process_setup

    @staticmethod
    def _lane_process_off(lane, why: str, error=None) -> None:
        """No tokenizer process on this lane from now on: its large prompts
        are encoded on the lane thread, each counted as a fallback (logged
        once per cause)."""
        lane.tokenizer_process_off = (why, error)
        return None

    def preprocessing_lane(self, size: Optional[int]) -> str:
        """The lane for a request of `size` bytes (None: unknown, so bulk)."""
        if size is not None and size <= SMALL_REQUEST_MAX_BYTES:
            return "small"
        return "bulk"

    async def run_request_preprocessing(
        self, size: Optional[int], func, /, *args, **kwargs
    ):
        """Run a blocking preprocessing step on the lane for a request of
        `size` bytes, with the caller's contextvars. Inside `func`,
        `self.tokenizer` is that lane's private copy."""
        if self._preprocessing_shut_down:
            raise asyncio.CancelledError("request preprocessing is shut down")
        if self._preprocessing_lanes is None:
            return func(*args, **kwargs)
        return await asyncio.wrap_future(
            self._submit_preprocessing(size, partial(func, *args, **kwargs))
        )

    def _submit_preprocessing(self, size: Optional[int], func) -> Future:
        """Queue func on the lane for `size` with the caller's contextvars."""
        lane = self.preprocessing_lane(size)
        executor = self._preprocessing_lanes[lane]
        ctx = contextvars.copy_context()
        path = f"preprocessing_lane_{lane}"
        try:
            future = executor.submit(ctx.run, func)
        except RuntimeError as error:  # shut down since the caller's check
            raise asyncio.CancelledError("request preprocessing is shut down") from error
        OFFLOAD_STATS.count(path, "steps")
        if not _LANE_REQUEST_COUNTED.get():
            _LANE_REQUEST_COUNTED.set(True)
            OFFLOAD_STATS.count(path, "uses")
        OFFLOAD_STATS.add_depth(path, 1)
        future.add_done_callback(lambda _: OFFLOAD_STATS.add_depth(path, -1))
        return future

    def _dispatch_off_loop(self, input_ids) -> bool:
        """Whether a request with these prompt ids is finished and serialized
        for dispatch on a worker (see OFF_LOOP_DISPATCH_MIN_IDS)."""
        return (
            input_ids is not None
            and len(input_ids) > OFF_LOOP_DISPATCH_MIN_IDS
            and self.__dict__.get("_preprocessing_lanes") is not None
        )

    def shutdown_request_preprocessing(self):
        """Stop the preprocessing workers. Idempotent, and a no-op on a
        manager whose workers were never created. Queued conversions are
        dropped (their requests are cancelled); a running one finishes."""
        self._preprocessing_shut_down = True
        lanes = self.__dict__.get("_preprocessing_lanes") or {}
        for executor in lanes.values():
            executor.shutdown(wait=False, cancel_futures=True)
        # A lane waiting on its process gets EOF and encodes in its thread.
        lock = self.__dict__.get("_tokenizer_processes_lock")
        if lock is not None:
            with lock:
                processes, self._tokenizer_processes = self._tokenizer_processes, []
            for process in processes:
                process.close()
        # Only the queued dispatch steps are cancelled: a discard queued behind
        # a running copy must still run, or that copy's segments stay in /dev/shm.
        for pending in list(self.__dict__.get("_pending_dispatches", {}).values()):
            pending.future.cancel()
        mm_shm_executor = self.__dict__.get("mm_shm_executor")
        if mm_shm_executor is not None:
            mm_shm_executor.shutdown(wait=False)
        # A call still in a child fails at once; what it wrote is unlinked.
        mm_process_pool = self.__dict__.get("mm_process_pool")
        if mm_process_pool is not None:
            mm_process_pool.close()

    async def _tokenize_unless_aborted(self, obj) -> bool:
        """Tokenize and send a single request; True (nothing sent) if it was
        aborted before its dispatch: during the serving layer's conversion,
        or while it was tokenized on a lane."""
        rid = obj.rid
        if self._take_aborted_in_conversion(rid):
            return True
        watched = self.begin_conversion(rid)
        try:
            tokenized_obj = await self._tokenize_one_request(obj)
        finally:
            aborted = watched and bool(self._end_watch(rid))
        if aborted:
            discard_mm_inputs_shm(getattr(tokenized_obj, "mm_inputs", None))
            return True
        await self._send_one_request(tokenized_obj)
        return False

    def begin_conversion(self, rid) -> bool:
        """From now until end_conversion(rid) (or the dispatch), an
        abort_request(rid) marks the request aborted instead of sending an
        AbortReq the scheduler would ignore. `rid`: a string, or a batch's
        list of them. False (nothing watched) for a rid that is neither or
        is watched already."""
        undispatched = self.__dict__.get("_undispatched")
        rids = _watchable_rids(rid)
        if undispatched is None or not rids or any(r in undispatched for r in rids):
            return False
        for r in rids:
            undispatched[r] = False
        return True

    def end_conversion(self, rid) -> None:
        """The serving layer's conversion of rid ended: the rids aborted
        meanwhile are finished as aborted, without a dispatch, when
        generate_request (in this task, or one it starts) gets them."""
        aborted = self._end_watch(rid)
        if aborted:
            _ABORTED_IN_CONVERSION.set(_ABORTED_IN_CONVERSION.get() | aborted)

    def _end_watch(self, rid) -> set:
        """Stop watching rid (begin_conversion); the rids aborted meanwhile."""
        return {r for r in _watchable_rids(rid) if self._undispatched.pop(r, False)}

    def _take_aborted_in_conversion(self, rid) -> set:
        """The rids of `rid` whose serving-layer conversion was aborted
        (end_conversion), taken out of this task's record."""
        recorded = _ABORTED_IN_CONVERSION.get()
        taken = recorded.intersection(_watchable_rids(rid))
        if taken:
            _ABORTED_IN_CONVERSION.set(recorded - taken)
        return set(taken)

    def _drop_prompt_ids(self, obj) -> None:
        """A finished request's huge prompt ids list (a chat's rendered
        prompt) is freed on a lane: the request object lives on in its
        handler's frames, and their return on the loop would free it there."""
        ids = getattr(obj, "input_ids", None)
        if type(ids) is list and self._dispatch_off_loop(ids):
            held = [ids]
            obj.input_ids = ids = None
            self._drop_ids_off_loop(held)

    def _drop_ids_off_loop(self, held: list) -> None:
        """Let go of the huge ids list in `held` on the bulk lane: freeing
        1.7 M ints is one ~14 ms call holding the GIL, and when the coroutine
        frame that held the list returned on the loop, /health waited for
        it."""
        try:
            self._submit_preprocessing(None, partial(_drop_ids, held))
        except asyncio.CancelledError:
            pass  # preprocessing is shut down: freed here

    def _finish_tokenized_request(
        self, obj, input_text, input_ids, input_embeds, mm_inputs, token_type_ids
    ):
        """Validate and build the tokenized request; also the prompt ids for
        return_prompt_token_ids (None when not asked for): the tokenizer's own
        list, reused, or a copy when the list belongs to the caller."""
        self._validate_one_request(obj, input_ids)
        tokenized_obj = self._create_tokenized_object(
            obj, input_text, input_ids, input_embeds, mm_inputs, token_type_ids
        )
        prompt_token_ids = None
        if obj.return_prompt_token_ids and tokenized_obj.input_ids is not None:
            owned = isinstance(input_ids, list) and input_ids is not obj.input_ids
            if mm_inputs is not None and input_ids is mm_inputs.input_ids:
                owned = False
            prompt_token_ids = (
                input_ids if owned else _ids_in_slices(tokenized_obj.input_ids, list)
            )
        return tokenized_obj, prompt_token_ids

    def _submit_to_shm_worker(self, func, *args) -> Future:
        if self._preprocessing_shut_down:
            raise asyncio.CancelledError("the shm worker is shut down")
        try:
            return self.mm_shm_executor.submit(func, *args)
        except RuntimeError as error:  # shut down between the check and here
            raise asyncio.CancelledError("the shm worker is shut down") from error

    async def _wrap_shm_features_off_loop(
        self,
        tokenized_obj: Union[TokenizedGenerateReqInput, TokenizedEmbeddingReqInput],
    ) -> bool:
        """Copy the request's features into /dev/shm on the shm worker.

        False if the request was aborted before its dispatch: nothing is sent
        then. On every other exit but dispatch the caller discards."""
        aborted, _ = await self._run_dispatch_step(
            tokenized_obj.rid,
            self._submit_to_shm_worker(wrap_shm_features, tokenized_obj),
        )
        return not aborted

    async def _run_dispatch_step(self, rid: str, future: Future):
        """Await an off-loop step of rid's dispatch: (aborted, its result).
        An abort_request(rid) meanwhile cancels it if still queued and in any
        case makes `aborted` True, so the caller never sends the request."""
        pending = _PendingDispatch(future)
        self._pending_dispatches[rid] = pending
        try:
            result = await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            # A step cancelled while still queued never ran: with the abort
            # as the only cause, the request ends as aborted.
            if pending.aborted and not asyncio.current_task().cancelling():
                return True, None
            raise
        finally:
            del self._pending_dispatches[rid]
        return pending.aborted, result

    def _encode_for_scheduler(self, tokenized_obj) -> Union[bytes, bytearray]:
        """The message _dispatch_to_scheduler would send for tokenized_obj,
        as bytes (run on a worker for a huge request)."""
        if self.tokenizer_ipc_name is not None:
            from sglang.srt.managers.tokenizer_manager import stamp_http_worker_ipc

            stamp_http_worker_ipc(tokenized_obj, self.tokenizer_ipc_name)
        time_stats = tokenized_obj.time_stats
        tokenized_obj.wrap_pickle_fields()
        try:
            return sock_encode(tokenized_obj, sliced=True)
        finally:
            tokenized_obj.time_stats = time_stats

    def _discard_shm_features(self, tokenized_obj, why: str) -> None:
        """Unlink every segment the request's copy created. Queued on the shm
        worker (FIFO), so it runs once a copy still running has ended; a copy
        that never started leaves nothing to unlink."""
        try:
            self._submit_to_shm_worker(
                self._discard_shm_features_now, tokenized_obj, why
            )
        except asyncio.CancelledError:
            # Shut down: no worker left, and nothing runs a copy any more.
            self._discard_shm_features_now(tokenized_obj, why)

    @staticmethod
    def _discard_shm_features_now(tokenized_obj, why: str) -> None:
        try:
            discard_shm_features(tokenized_obj)
        except Exception:
            logger.warning(
                f"Failed to discard the shm features of {why} request "
                f"{tokenized_obj.rid}",
                exc_info=True,
            )
        else:
            logger.info(
                f"Discarded the shm features of {why} request {tokenized_obj.rid}"
            )
