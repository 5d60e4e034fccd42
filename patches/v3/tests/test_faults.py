"""The v3 engine under faults and limits (offload-process.diff): processes killed at any moment,
and limits enforced on the routes a client uses.

- A server SIGKILLed mid-request (the OOM killer, `docker kill`) leaves no /dev/shm segment:
  its multimodal child dies with it and unlinks what the dead server owned, and a server that
  starts unlinks what dead servers left. Real processes, real /dev/shm, the GLM-V-class
  processor with the GLM-class tokenizer (151,552 tokens), 16 real PNG images.
- SGLANG_MAX_REQUEST_BODY_BYTES holds on the real FastAPI app's routes (`http_server.app`, its
  middleware and routes as uvicorn calls them): 413 before the body is read past the limit.
- The body queue is bounded in bytes; every offload path can be switched off, and an Engine in
  library mode starts no child unless asked.
- A child's answer is unpickled with an allowlist: a pickle that names any other global is
  refused, and the request is done in this process instead (counted).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from typing import Any, Dict, List, Tuple

import pytest

import glm_vision as glm_vision_module
from conftest import request_body_module

SHM_DIR = "/dev/shm"
TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
# Bounds of waits on another process's progress: reached only when the code under test is broken.
WAIT_S = 120.0


def _named(marker: str) -> List[str]:
    return sorted(n for n in os.listdir(SHM_DIR) if marker in n)


def _gone(pid: int) -> bool:
    """The process has exited (a zombie left for a reaper counts as exited)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_until(what: str, condition, deadline_s: float = WAIT_S) -> None:
    end = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {deadline_s:.0f} s")
        time.sleep(0.01)


# -- a SIGKILLed server ----------------------------------------------------------------------

# The stand-in for the HTTP server process: the GLM-V processor's pool, one child, a 16-image
# request. It prints its owner token and child pid once the child served a warm-up request, then
# sends the big request and waits for an answer it never gets (the test SIGKILLs it).
SERVER = r"""
import asyncio, json, pathlib, sys
sys.path.insert(0, sys.argv[1])
import glm_vision as gv
from transformers import AutoTokenizer
from glm53_offload import offload_process
from sglang.srt.managers.mm_utils import discard_mm_inputs_shm

directory = pathlib.Path(sys.argv[2])
vision = gv.build(directory, AutoTokenizer.from_pretrained(directory))
pool = vision.pool(workers=1, max_queued=1)
async def never():
    raise AssertionError("fell back")
warm = gv.request([gv.data_url(gv.noise_png(64, 64, 0))])
discard_mm_inputs_shm(asyncio.run(pool.process(gv.mm_kwargs(warm), 1, never)))
(child,) = [p.pid for p in pool._processes if not p.closed]
# The owner token names the segments; a tree without owners (the previous v3) names them by pid.
owner = getattr(offload_process, "segment_owner", None)
token = owner().token if owner is not None else str(__import__("os").getpid())
print(json.dumps({"token": token, "child": child}), flush=True)
images = [gv.data_url(gv.noise_png(1280, 1280, seed)) for seed in range(1, 17)]
obj = gv.request(images)
asyncio.run(pool.process(gv.mm_kwargs(obj), len(images), never))
print("answered", flush=True)
"""


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_server_sigkilled_mid_request_leaves_no_segment(glm_tokenizer, tmp_path):
    """SIGKILL of the server while its child writes the features of a 16 x 1280x1280 request:
    0 segments and no owner file left, and the child is gone. The previous v3 left every
    segment the child wrote (it had let go of them for the server)."""
    glm_tokenizer.save_pretrained(tmp_path)
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, TESTS_DIR, str(tmp_path)],
        stdout=subprocess.PIPE, text=True, start_new_session=True,
    )
    child = None
    try:
        line = server.stdout.readline()
        assert line, f"the server stand-in exited before it was ready ({server.wait()})"
        started = json.loads(line)
        token, child = started["token"], started["child"]
        marker = f"_{token}_"
        # The child writes its first segment only after decoding all 16 images: the kill lands
        # mid-request, while the other segments are still being written.
        _wait_until("the child's first segment", lambda: any(
            n.startswith("sgl_shm_mmproc") for n in _named(marker)))
        os.kill(server.pid, signal.SIGKILL)
        server.wait()
        _wait_until(f"the child (pid {child}) ending with its server", lambda: _gone(child))
        left = _named(marker)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        if child is not None and not _gone(child):
            os.kill(child, signal.SIGKILL)
    assert left == [], f"a SIGKILLed server left {len(left)} entries in {SHM_DIR}: {left[:5]}"


DEAD_OWNER = r"""
import json, sys
from multiprocessing import resource_tracker, shared_memory
from glm53_offload import offload_process
names = []
for _ in range(3):
    segment = shared_memory.SharedMemory(
        create=True, size=1 << 20, name=offload_process.owned_segment_name("mm"))
    # Handed on, as a request's segments are: no longer this process's resource tracker's.
    resource_tracker.unregister("/" + segment.name, "shared_memory")
    names.append(segment.name)
print(json.dumps(names), flush=True)
sys.stdin.read()
"""


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_starting_server_unlinks_what_a_dead_one_owned_and_nothing_else():
    """A server killed with segments handed out (to a scheduler killed with it) leaves them; the
    next server's start (segment_owner, which _start_mm_process_pool runs first) unlinks them
    and its owner file, counted, and leaves a live owner's segments alone."""
    from multiprocessing import shared_memory

    from glm53_offload import offload_process

    live = shared_memory.SharedMemory(
        create=True, size=1 << 20, name=offload_process.owned_segment_name("mm"))
    dead = subprocess.Popen([sys.executable, "-c", DEAD_OWNER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        names = json.loads(dead.stdout.readline())
        dead_marker = names[0].split("_")[3]
        assert len(_named(f"_{dead_marker}")) == 4  # 3 segments and the owner file
        os.kill(dead.pid, signal.SIGKILL)
        dead.wait()
        starting = subprocess.run(
            [sys.executable, "-c",
             "from glm53_offload import offload_process as o; o.segment_owner(); "
             "print(o.STATS.snapshot().get('segments.swept', 0))"],
            capture_output=True, text=True, timeout=WAIT_S)
        assert starting.returncode == 0, starting.stderr[-2000:]
        assert starting.stdout.split()[-1] == "3", starting.stdout
        assert _named(f"_{dead_marker}") == []
        assert os.path.exists(os.path.join(SHM_DIR, live.name)), "a live owner's segment was unlinked"
    finally:
        live.close()
        live.unlink()
        if dead.poll() is None:
            dead.kill()
            dead.wait()


# -- the body limit on the real routes -------------------------------------------------------

CHUNK = 64 * 1024
ROUTES = ["/generate", "/v1/completions", "/v1/chat/completions", "/v1/messages"]


def _post(path: str, size: int, declare: bool,
          body: bytes = b"") -> Tuple[int, int, Dict[str, Any]]:
    """POST `size` bytes to the real app (`http_server.app`, as uvicorn calls it) in 64 KiB
    chunks, with or without Content-Length: `body` padded with spaces to `size`. (status,
    bytes the app pulled, response JSON)."""
    from sglang.srt.entrypoints.http_server import app

    headers = [(b"content-type", b"application/json")]
    if declare:
        headers.append((b"content-length", str(size).encode()))
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
             "root_path": "", "headers": headers, "client": ("127.0.0.1", 40000),
             "server": ("127.0.0.1", 30000)}
    pulled = 0
    sent: List[dict] = []

    async def receive():
        nonlocal pulled
        if pulled >= size:
            return {"type": "http.disconnect"}
        end = min(pulled + CHUNK, size)
        chunk = body[pulled:end].ljust(end - pulled)
        pulled += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": pulled < size}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], pulled, json.loads(body)


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
@pytest.mark.parametrize("path", ROUTES)
def test_a_chunked_body_over_the_limit_is_refused_before_it_is_read(path, monkeypatch):
    """16 MiB chunked against a 4 MiB limit: 413 once the limit is crossed (at most one chunk
    past it). The previous v3 checked the limit in ORJSONRequest.json(), which FastAPI calls
    only after starlette's body() read all 16 MiB."""
    limit = 4 << 20
    monkeypatch.setattr(request_body_module(), "MAX_REQUEST_BODY_BYTES", limit, raising=False)  # stock: none
    status, pulled, answer = _post(path, 16 << 20, declare=False)
    assert status == 413, (status, answer)
    assert pulled <= limit + CHUNK, f"{path} read {pulled} bytes of a body over {limit}"
    assert "SGLANG_MAX_REQUEST_BODY_BYTES" in json.dumps(answer)


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
@pytest.mark.parametrize("path", ROUTES)
def test_a_declared_length_over_the_limit_is_refused_unread(path, monkeypatch):
    monkeypatch.setattr(request_body_module(), "MAX_REQUEST_BODY_BYTES", 4 << 20, raising=False)  # stock: none
    status, pulled, answer = _post(path, 16 << 20, declare=True)
    assert (status, pulled) == (413, 0), (status, pulled, answer)
    assert "16777216 bytes exceeds the limit" in json.dumps(answer)


def test_a_body_under_the_limit_reaches_the_route(monkeypatch):
    """The limit refuses nothing under it: a body of whitespace is read whole and reaches
    FastAPI's own validation (422 or 400), not a 413."""
    monkeypatch.setattr(request_body_module(), "MAX_REQUEST_BODY_BYTES", 4 << 20, raising=False)  # stock: none
    status, pulled, _ = _post("/generate", 2 << 20, declare=False)
    assert status != 413 and pulled == 2 << 20, (status, pulled)


@pytest.mark.detects_stock_bug
@pytest.mark.parametrize("path, body, json_child", [
    ("/generate", b"", True),  # blank: the parse fails (400)
    ("/v1/chat/completions", b'{"model": "glm", "max_tokens": 1}', True),  # no messages (4xx)
    ("/v1/chat/completions", b'{"model": "glm", "max_tokens": 1}', False),  # parsed here
])
def test_a_large_bodys_pages_are_handed_back_off_the_loop_when_it_dies(
        path, body, json_child, monkeypatch):
    """A 24 MiB body through a real route, parsed by a JSON child or (SGLANG_JSON_PARSE_PROCESSES
    =0) in this process: when its last holder drops it, the body-release thread hands its pages
    back (counted), so the free on the loop returns none. Freed on the loop, a 221 MB body
    stopped it 12-21 ms (bench_body_ingest.py's loop gap of that body)."""
    import gc

    module = request_body_module()
    if not json_child:
        monkeypatch.setattr(module, "LARGE_BODY_PARSER", None, raising=False)  # stock: none
    from glm53_offload.offload_process import STATS

    def released() -> Dict[str, int]:
        # Requests live in reference cycles: the cyclic GC frees them (in the server, on the
        # thread that collects). Then wait for the release thread to handle what they queued.
        gc.collect()
        assert module.flush_released_bodies(WAIT_S), "the body-release thread did not answer"
        counts = STATS.snapshot()
        return {event: counts.get(f"{module.BODY_RELEASE_PATH}.{event}", 0)
                for event in ("uses", "failed")}

    before = released()  # earlier tests' bodies
    status, pulled, answer = _post(path, 24 << 20, declare=True, body=body)
    assert pulled == 24 << 20 and 400 <= status < 500 and status != 413, (status, answer)
    after = released()
    assert {e: after[e] - before[e] for e in after} == {"uses": 1, "failed": 0}, (before, after)


def _read_body(chunks: List[bytes], declared: int) -> Any:
    """The server's body read (ORJSONRequest.body, every route's) of `chunks`, with
    Content-Length `declared` (0: none, as a chunked body)."""
    from sglang.srt.entrypoints.http_server import ORJSONRequest

    pending = list(chunks)

    async def receive():
        body = pending.pop(0) if pending else b""
        return {"type": "http.request", "body": body, "more_body": bool(pending)}

    headers = [(b"content-length", str(declared).encode())] if declared else []
    request = ORJSONRequest({"type": "http", "method": "POST", "path": "/generate",
                             "headers": headers, "query_string": b""}, receive)
    return asyncio.run(request.body())


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_declared_body_is_read_into_one_buffer_of_its_size():
    """24 MiB declared: the chunks are copied to their places in one buffer allocated at that
    size (its allocation is the body plus the trailing NUL), not grown and copied again at each
    reallocation (8 x 6.3 MB: 0.84-1.02x stock grown, 1.31-1.53x placed). A body longer or
    shorter than declared still arrives whole and in order."""
    chunks = [bytes([65 + i % 26]) * CHUNK for i in range(384)]
    whole = b"".join(chunks)
    placed = _read_body(chunks, declared=len(whole))
    assert placed == whole and placed.__alloc__() == len(whole) + 1, placed.__alloc__()
    assert _read_body(chunks, declared=len(whole) - 5 * CHUNK) == whole  # more than declared
    assert _read_body(chunks[:-3], declared=len(whole)) == b"".join(chunks[:-3])  # fewer
    assert _read_body(chunks, declared=0) == whole  # chunked: grown


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_the_body_queue_is_bounded_in_bytes():
    """A 10 MiB bound with 6 MiB held (a call that waits on an event, so it holds its bytes
    until released): a 6 MB body is refused with the setting named, counted, far below the
    64-call bound; once released, the same body alone gets in."""
    import threading

    from glm53_offload import offload_process

    parser = offload_process.JsonBodyParser(workers=2, max_queued=64, max_queued_bytes=10 << 20)
    body = b'{"prompt": "' + b"x" * (6 << 20) + b'"}'
    before = offload_process.STATS.snapshot().get("json_process.rejected", 0)
    release = threading.Event()
    try:
        held = parser._submit(release.wait, size=6 << 20)
        with pytest.raises(offload_process.OffloadQueueFull) as refused:
            asyncio.run(parser.loads(body))
        release.set()
        held.result(timeout=WAIT_S)
        alone = asyncio.run(parser.loads(body))
    finally:
        release.set()
        parser.close()
    assert len(alone["prompt"]) == 6 << 20
    assert "SGLANG_JSON_PARSE_MAX_QUEUED_BYTES" in str(refused.value)
    assert offload_process.STATS.snapshot().get("json_process.rejected", 0) == before + 1


# -- off switches and library mode -------------------------------------------------------------

LARGE_TEXT = "The quick brown fox jumps over the lazy dog. " * 8000  # 360 K characters


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_library_mode_starts_no_child(make_tokenizer_manager, glm_tokenizer, monkeypatch):
    """An Engine embedded in a program (no launch_server): a large prompt is encoded on the lane,
    no tokenizer child runs, and the multimodal pool stays off. The previous v3 started a
    ~157 MiB tokenizer child in every such program."""
    from glm53_offload import offload_process

    monkeypatch.delenv("SGLANG_OFFLOAD_IN_HTTP_SERVER", raising=False)
    tm = make_tokenizer_manager(glm_tokenizer)
    ids, _ = asyncio.run(tm._tokenize_texts(LARGE_TEXT))
    assert ids == glm_tokenizer.encode(LARGE_TEXT)
    assert tm._tokenizer_processes == []
    assert offload_process.child_processes("SGLANG_MM_PROCESSES", 2) == 0


@pytest.mark.detects_stock_bug
@pytest.mark.parametrize("setting", [
    pytest.param("SGLANG_TOKENIZER_PROCESSES", marks=pytest.mark.detects_previous_v3),
    pytest.param("SGLANG_JSON_PARSE_PROCESSES", marks=pytest.mark.detects_previous_v3),
    "SGLANG_MM_PROCESSES",  # the previous v3 honoured this one
])
def test_zero_switches_a_child_off_in_the_server(setting, make_tokenizer_manager, glm_tokenizer,
                                                 monkeypatch, tmp_path):
    """`0` keeps the work in the server process; the previous v3 still started a JSON child
    for SGLANG_JSON_PARSE_PROCESSES=0 and had no tokenizer switch."""
    from glm53_offload import offload_process

    monkeypatch.setenv("SGLANG_OFFLOAD_IN_HTTP_SERVER", "1")
    monkeypatch.setenv(setting, "0")
    if setting == "SGLANG_TOKENIZER_PROCESSES":
        tm = make_tokenizer_manager(glm_tokenizer)
        assert asyncio.run(tm._tokenize_texts(LARGE_TEXT))[0] == glm_tokenizer.encode(LARGE_TEXT)
        assert tm._tokenizer_processes == []
    elif setting == "SGLANG_JSON_PARSE_PROCESSES":
        assert offload_process.JsonBodyParser.from_env() is None
    else:
        vision = glm_vision_module.build(tmp_path, glm_tokenizer)
        tm = make_tokenizer_manager(glm_tokenizer)
        tm.mm_processor = vision.processor
        tm.server_args = vision.server_args
        tm.model_config.hf_config = vision.hf_config
        try:
            assert tm._start_mm_process_pool(vision.hf_processor, vision.transport) is None
        finally:
            vision.processor.shutdown()


# -- the child's answer is not trusted ---------------------------------------------------------


class _Exploit:
    def __reduce__(self):
        return (os.system, ("true",))


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_childs_answer_naming_another_global_is_refused():
    """What an exploited image decoder in the child could send: a pickle that calls os.system.
    Refused by name; the processor output's own types load."""
    from glm53_offload import offload_process

    allowed = offload_process._mm_answer_types()
    with pytest.raises(pickle.UnpicklingError, match="posix.system|os.system"):
        offload_process._PersistentStrings(io.BytesIO(pickle.dumps(_Exploit())), [], allowed).load()
    with pytest.raises(pickle.UnpicklingError):  # a parsed body names no global at all
        offload_process._PersistentStrings(io.BytesIO(pickle.dumps(_Exploit())), []).load()


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_a_childs_output_loads_through_the_allowlist(glm_tokenizer, tmp_path):
    """A real answer (GLM-V processor, two images) round-trips through the child's pickler and
    the allowlist with the in-process features and prompt; a torch.load inside it (what a plain
    pickle of a tensor carries) is not among the allowed globals."""
    import torch

    from glm53_offload import offload_process

    vision = glm_vision_module.build(tmp_path, glm_tokenizer)
    try:
        obj = glm_vision_module.request([
            glm_vision_module.data_url(glm_vision_module.noise_png(640, 480, 1)),
            glm_vision_module.data_url(glm_vision_module.noise_jpeg(800, 600, 2), "jpeg")])
        output = asyncio.run(vision.processor.process_mm_data_async(
            **glm_vision_module.mm_kwargs(obj)))
    finally:
        vision.processor.shutdown()
    buffer = io.BytesIO()
    offload_process._SegmentsOut(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(output)
    allowed = offload_process._mm_answer_types()
    loaded = offload_process._PersistentStrings(io.BytesIO(buffer.getvalue()), [], allowed).load()
    assert loaded.input_ids == output.input_ids
    for mine, theirs in zip(loaded.mm_items, output.mm_items):
        assert mine.modality == theirs.modality
        assert torch.equal(mine.feature, theirs.feature)
    assert ("torch.storage", "_load_from_bytes") not in allowed
    assert ("builtins", "getattr") not in allowed


# -- start-up ----------------------------------------------------------------------------------


@pytest.mark.detects_stock_bug
@pytest.mark.detects_previous_v3
def test_the_post_warmup_freeze_gc_waits_for_the_server_to_listen(monkeypatch, caplog):
    """With --skip-server-warmup the post-warmup /freeze_gc is sent while uvicorn is still
    binding its socket. Here the port is bound but not listening, so the first attempt is
    refused; the listener starts when the function waits (its first sleep), and the freeze
    reaches it, with nothing logged. 0.5.19 and the previous v3 gave up at once, logged a
    traceback (which the rollout's startup-log gate refuses) and left the GC unfrozen."""
    import http.server
    import logging
    import threading
    from types import SimpleNamespace

    from sglang.srt.entrypoints import http_server

    posted: List[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            posted.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler, bind_and_activate=False)
    server.socket.bind(("127.0.0.1", 0))  # bound, not listening: a connect is refused
    port = server.socket.getsockname()[1]
    serving: List[threading.Thread] = []
    real_sleep = time.sleep

    def sleep_and_listen(seconds):
        if not serving:
            server.server_activate()
            serving.append(threading.Thread(target=server.handle_request, daemon=True))
            serving[0].start()
        real_sleep(seconds)

    monkeypatch.setattr(http_server.time, "sleep", sleep_and_listen)
    monkeypatch.setattr(http_server, "ssl_verify_of", lambda cfg: False)
    args = SimpleNamespace(admin_api_key=None, api_key=None, url=lambda: f"http://127.0.0.1:{port}")
    try:
        with caplog.at_level(logging.WARNING):
            http_server._freeze_gc_after_server_warmup(args)
    finally:
        for thread in serving:
            thread.join(timeout=WAIT_S)
        server.server_close()
    assert serving, "the first attempt was not refused: the test did not exercise the race"
    assert posted == ["/freeze_gc"]
    assert "freeze_gc failed" not in caplog.text
