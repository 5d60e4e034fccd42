"""A fake SGLang scheduler, installed into the real server as an SGLang general plugin.

`python3 -m sglang.launch_server` calls `load_plugins()` in the server process, and
`run_scheduler_process` calls it again first thing in the spawned scheduler process. The
plugin (entry point group `sglang.srt.plugins`, declared by the dist-info directory beside this
file) replaces the `Scheduler` class with `FakeScheduler`, so the unmodified launcher, HTTP
server, TokenizerManager and detokenizer run, and only the GPU part is missing. Activate it
with this directory on PYTHONPATH and SGLANG_PLUGINS=lab_fake_scheduler.

The fake speaks the scheduler's ZMQ contract (sglang-targets.md §5.3): it connects PULL to
`scheduler_input_ipc_name`, reports ready through the pipe `run_scheduler_process` sends
`get_init_info()` on, and answers every TokenizedGenerateReqInput with a finished one-token
BatchStrOutput PUSHed straight to `tokenizer_ipc_name` (the detokenizer is left idle); a
ShutdownReq ends its loop, so the process exits as the real scheduler's does. The
reply's prompt_tokens is len(input_ids), so clients read the real tokenizer's count back.
Multimodal features sent through /dev/shm are opened and unlinked as the real scheduler does.

LAB_FAKE_SCHEDULER_LOG=<file> appends one JSON line per received message.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from array import array
from dataclasses import asdict, dataclass, replace
from typing import Any

# Large enough for the 5 MB bodies; also the TokenizerManager's max_req_input_len.
MAX_TOKENS = 8 * 1024 * 1024
PLUGIN_NAME = "lab_fake_scheduler"
SCHEDULER_TARGET = "sglang.srt.managers.scheduler.Scheduler"
REPLY_TEXT = "ok"


@dataclass(frozen=True)
class Received:
    """What the fake saw of one message (one JSON line of the log)."""

    kind: str
    rid: str | None
    received_at: float  # time.monotonic(); CLOCK_MONOTONIC is shared by the container's processes
    input_ids: int = 0
    # sha256 of the ids as int64: the same prompt on two arms has the same digest.
    input_sha256: str | None = None
    mm_items: int = 0
    mm_feature_bytes: int = 0
    mm_shm_items: int = 0
    # sha256 of every item's features as the scheduler reads them (after the /dev/shm copy): the
    # same images processed in-process (stock) and in a child (v3) give the same digest.
    mm_feature_sha256: str | None = None


def register() -> None:
    """Plugin entry point: replace the Scheduler class (applied by load_plugins)."""
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    HookRegistry.register(SCHEDULER_TARGET, FakeScheduler, HookType.REPLACE)


def init_info() -> dict[str, Any]:
    """The ready message `Scheduler.get_init_info()` sends (exactly these keys)."""
    return {
        "status": "ready",
        "max_total_num_tokens": MAX_TOKENS,
        "max_req_input_len": MAX_TOKENS,
        "startup_time": {},
    }


def reply_for(req) -> Any:
    """A finished one-token BatchStrOutput for one TokenizedGenerateReqInput."""
    import msgspec
    from sglang.srt.managers.io_struct import BatchStrOutput

    prompt_tokens = len(req.input_ids) if req.input_ids is not None else 0
    known = {
        "rids": [req.rid],
        "http_worker_ipcs": [req.http_worker_ipc],
        "finished_reasons": [{"type": "length", "length": 1}],
        "output_strs": [REPLY_TEXT],
        "output_ids": [array("q", [0])],
        "prompt_tokens": [prompt_tokens],
        "completion_tokens": [1],
        "reasoning_tokens": [0],
        "cached_tokens": [0],
        # Defaulted to None, yet indexed per request by TokenizerManager._handle_batch_output.
        "retraction_counts": [0],
    }
    # Every other required field is an Optional per-request list: None means "not requested".
    required = {
        field.name: None
        for field in msgspec.structs.fields(BatchStrOutput)
        if field.required and field.name not in known
    }
    return BatchStrOutput(**known, **required)


def _mm_summary(req) -> tuple[int, int, int]:
    """(items, feature bytes, items whose feature came through /dev/shm) of req.mm_inputs."""
    import torch
    from sglang.srt.managers.mm_utils import ShmPointerMMData

    mm = getattr(req, "mm_inputs", None)
    items = getattr(mm, "mm_items", None) or []
    total = shm = 0
    for item in items:
        for value in (getattr(item, "feature", None), getattr(item, "precomputed_embeddings", None)):
            values = value if isinstance(value, list) else [value]
            for v in values:
                if isinstance(v, ShmPointerMMData):
                    shm += 1
                    total += int(torch.Size(v.shape).numel()) * torch.empty((), dtype=v.dtype).element_size()
                elif isinstance(v, torch.Tensor):
                    total += v.numel() * v.element_size()
    return len(items), total, shm


def features_digest(mm_inputs) -> str:
    """sha256 over each item's modality, offsets, feature tensors and model-specific tensors
    (dtype, shape, bytes), in item order."""
    import torch

    digest = hashlib.sha256()

    def add(label: str, value) -> None:
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, torch.Tensor):
                digest.update(f"{label}:{v.dtype}:{tuple(v.shape)};".encode())
                digest.update(memoryview(v.detach().contiguous().view(torch.uint8).numpy()))
            elif v is not None:
                digest.update(f"{label}={v!r};".encode())

    for item in getattr(mm_inputs, "mm_items", None) or []:
        add("modality", str(getattr(item, "modality", None)))
        add("offsets", getattr(item, "offsets", None))
        add("feature", getattr(item, "feature", None))
        add("precomputed_embeddings", getattr(item, "precomputed_embeddings", None))
        for key, value in sorted((getattr(item, "model_specific_data", None) or {}).items()):
            add(f"model_specific_data.{key}", value)
    return digest.hexdigest()


def ids_digest(input_ids) -> str | None:
    if input_ids is None:
        return None
    return hashlib.sha256(array("q", input_ids).tobytes()).hexdigest()


def describe(req, received_at: float) -> Received:
    from sglang.srt.managers.io_struct import TokenizedGenerateReqInput

    if isinstance(req, TokenizedGenerateReqInput):
        items, nbytes, shm = _mm_summary(req)
        return Received(
            kind=type(req).__name__,
            rid=req.rid,
            received_at=received_at,
            input_ids=len(req.input_ids) if req.input_ids is not None else 0,
            input_sha256=ids_digest(req.input_ids),
            mm_items=items,
            mm_feature_bytes=nbytes,
            mm_shm_items=shm,
        )
    return Received(kind=type(req).__name__, rid=getattr(req, "rid", None), received_at=received_at)


class _NoMetrics:
    """run_scheduler_process's finally block calls scheduler.metrics_reporter._shutdown_fpm()."""

    def _shutdown_fpm(self) -> None:
        return None


def _in_flight_gauges(server_args) -> None:
    """The real scheduler's in-flight gauges, at 0: the fake holds no request past its reply.

    With --enable-metrics the server's /metrics reads the scheduler's gauges from the
    multiprocess directory launch_server set; the rollout's drain waits on these two."""
    if not getattr(server_args, "enable_metrics", False) or not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return
    from prometheus_client import Gauge

    for name in ("sglang:num_running_reqs", "sglang:num_queue_reqs"):
        gauge = Gauge(name, f"{name} (fake scheduler: always 0)", labelnames=["model_name"], multiprocess_mode="mostrecent")
        gauge.labels(model_name=server_args.served_model_name).set(0)


class FakeScheduler:
    """Stands in for sglang's Scheduler inside the real run_scheduler_process."""

    def __init__(self, server_args, port_args, *args, **kwargs) -> None:
        import zmq
        from sglang.srt.utils.network import get_zmq_socket

        self.gracefully_exit = False
        self.metrics_reporter = _NoMetrics()
        self._context = zmq.Context(2)
        self._recv = get_zmq_socket(self._context, zmq.PULL, port_args.scheduler_input_ipc_name, False)
        self._send = get_zmq_socket(self._context, zmq.PUSH, port_args.tokenizer_ipc_name, False)
        self._log_path = os.environ.get("LAB_FAKE_SCHEDULER_LOG")
        _in_flight_gauges(server_args)

    def get_init_info(self) -> dict[str, Any]:
        return init_info()

    def run_event_loop(self) -> None:
        # Until a ShutdownReq, as the real loop: the server's SIGTERM path sends one and waits up
        # to 15 s for the scheduler process to exit before it kills the tree.
        while not self.gracefully_exit:
            self.handle(self._recv_one())

    def _recv_one(self):
        from sglang.srt.managers.io_struct import sock_recv

        return sock_recv(self._recv)

    def handle(self, msg) -> list[Received]:
        """Answers one message (a request or a batch of them); returns what was seen."""
        from sglang.srt.managers.io_struct import (
            BatchTokenizedGenerateReqInput,
            ShutdownReq,
            TokenizedGenerateReqInput,
            sock_send,
        )
        from sglang.srt.managers.mm_utils import unwrap_shm_features

        now = time.monotonic()
        reqs = list(msg.batch) if isinstance(msg, BatchTokenizedGenerateReqInput) else [msg]
        seen = []
        for req in reqs:
            if hasattr(req, "unwrap_pickle_fields"):
                req.unwrap_pickle_fields()
            received = describe(req, now)
            if isinstance(req, TokenizedGenerateReqInput):
                if req.mm_inputs is not None:
                    # Opens and unlinks the /dev/shm segments, as the real receiver does.
                    unwrap_shm_features(req)
                    received = replace(received, mm_feature_sha256=features_digest(req.mm_inputs))
                sock_send(self._send, reply_for(req))
            elif isinstance(req, ShutdownReq):
                self.gracefully_exit = True
            seen.append(received)
        self._log(seen)
        return seen

    def _log(self, seen: list[Received]) -> None:
        if not self._log_path:
            return
        with open(self._log_path, "a", encoding="utf-8") as out:
            for item in seen:
                out.write(json.dumps(asdict(item), sort_keys=True) + "\n")

    def release_host_resources(self) -> None:
        self._recv.close(linger=0)
        self._send.close(linger=0)
        self._context.term()
