"""Request bodies on the HTTP server's real routes: the size limit, the read and the parse.

FastAPI reads a route's body (the request's body()) before the route's own code runs, so a
limit checked in json() comes after the whole body is in memory. RequestBodyLimit, an ASGI
middleware on the app, refuses a body over SGLANG_MAX_REQUEST_BODY_BYTES with 413 before it is
read past the limit. read_body appends a large body's chunks to one buffer as they arrive
(starlette joins them at the end: one copy of the whole body holding the GIL, about 250 ms for
221 MB); the buffer's last holder, at the end of its request on the loop, does not free it:
the body-release thread hands its pages back first (LargeBody). parse_json hands a body over
LARGE_BODY_MIN_BYTES to a JSON child process (offload_process.JsonBodyParser;
SGLANG_JSON_PARSE_PROCESSES=0 parses every body here). SGLang's http_server keeps the calls:
ORJSONRequest.body/json and app.add_middleware.
"""

from __future__ import annotations

import ctypes
import mmap
import queue
import threading
from typing import Any, Optional

import orjson

from glm53_offload.offload_process import (
    STATS,
    BodyQueueFull,
    JsonBodyParser,
    env_number,
    whole_pages,
)

# A body larger than this is parsed by a child process: one orjson.loads of it
# holds the GIL for 5-50 ms, which on any thread of this process is a stall of
# the event loop; unpickling the child's result only copies the strings.
# Smaller bodies parse in well under a millisecond here.
LARGE_BODY_MIN_BYTES = 1 << 20
# None when SGLANG_JSON_PARSE_PROCESSES is 0: every body is parsed here.
LARGE_BODY_PARSER = JsonBodyParser.from_env()
# The largest request body accepted (413 above it): a body is held in memory
# whole, and parsed into about as much again.
MAX_REQUEST_BODY_BYTES = env_number("SGLANG_MAX_REQUEST_BODY_BYTES", 1 << 30)


def body_too_large(size: str, limit: int):
    from fastapi import HTTPException

    return HTTPException(
        status_code=413,
        detail=f"request body of {size} bytes exceeds the limit of "
        f"{limit} bytes (SGLANG_MAX_REQUEST_BODY_BYTES)",
    )


class RequestBodyLimit:
    """ASGI middleware: a body over MAX_REQUEST_BODY_BYTES is refused with 413
    on every route before it is read past the limit: a declared
    Content-Length at once, a chunked body at the chunk that crosses it (raised
    from `receive`, so the route's body read ends there)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = MAX_REQUEST_BODY_BYTES  # read per request: tests lower it
        for key, value in scope.get("headers", ()):
            if key == b"content-length":
                if value.isdigit() and int(value) > limit:
                    from fastapi import HTTPException, Request

                    # The app's own HTTPException handler (starlette puts the
                    # app in the scope): the error body every route answers
                    # with, OpenAI or Anthropic style.
                    handler = scope["app"].exception_handlers[HTTPException]
                    response = await handler(
                        Request(scope), body_too_large(value.decode(), limit)
                    )
                    return await response(scope, receive, send)
                break
        received = 0

        async def limited_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise body_too_large(f"more than {limit}", limit)
            return message

        return await self.app(scope, limited_receive, send)


# Freeing a 221 MB body on the event loop (its pages returned by one munmap,
# the GIL held) stopped the loop 12-21 ms. The release thread returns the pages
# first with madvise, a foreign call that releases the GIL; the free after it
# has no pages left to return (the loop's worst gap over such a parse: 3-7 ms).
BODY_RELEASE_PATH = "body_release"
BODY_RELEASE_THREAD = "sglang-body-release"
_released: "queue.SimpleQueue" = queue.SimpleQueue()
_release_thread_lock = threading.Lock()
_release_thread = None


class LargeBody(bytearray):
    """A large request body's buffer. Whichever thread drops its last reference
    only queues it (__del__ resurrects it onto the release queue); the release
    thread hands its pages back and lets it go. CPython calls __del__ on every
    death of such an object, hence the flag."""

    def __del__(self, _queue=_released) -> None:
        if not self.__dict__.get("pages_released"):
            _queue.put(self)


def _start_release_thread() -> None:
    global _release_thread
    with _release_thread_lock:
        if _release_thread is None:
            _release_thread = threading.Thread(
                target=_release_bodies, name=BODY_RELEASE_THREAD, daemon=True
            )
            _release_thread.start()


def _release_bodies() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    while True:
        body = _released.get()
        if isinstance(body, threading.Event):  # flush_released_bodies
            body.set()
            continue
        body.pages_released = True
        data = (ctypes.c_char * len(body)).from_buffer(body)
        address = ctypes.addressof(data)
        del data
        # Whole pages inside the buffer only: the allocator's words around it stay.
        first, length = whole_pages(address, address + len(body))
        if length > 0 and libc.madvise(first, length, mmap.MADV_DONTNEED) != 0:
            STATS.slow_path(
                BODY_RELEASE_PATH,
                "failed",
                f"madvise errno {ctypes.get_errno()}: the pages are freed holding the GIL",
            )
        else:
            STATS.count(BODY_RELEASE_PATH, "uses")
        del body  # the last reference: freed here, no pages left to return


def flush_released_bodies(timeout: float) -> bool:
    """Wait until the release thread has handled every body queued before this
    call (for tests and benchmarks); False if it did not within `timeout`."""
    if _release_thread is None:
        return True
    reached = threading.Event()
    _released.put(reached)
    return reached.wait(timeout)


def request_body_size(request) -> Optional[int]:
    """The request's declared body size in bytes (Content-Length), or None when unknown
    (chunked, or no request)."""
    headers = getattr(request, "headers", None)
    length = headers.get("content-length") if headers is not None else None
    try:
        return int(length) if length is not None else None
    except ValueError:
        return None


_resize = ctypes.pythonapi.PyByteArray_Resize
_resize.argtypes = [ctypes.py_object, ctypes.c_ssize_t]
_resize.restype = ctypes.c_int


def _unzeroed_body(size: int) -> LargeBody:
    """A LargeBody of `size` bytes left as the allocator gave them: bytearray(size) would zero
    all of them at once on the loop; here each page is first touched by the chunk copied in."""
    body = LargeBody()
    _resize(body, size)  # raises MemoryError as bytearray(size) would
    return body


async def read_body(request) -> bytes:
    """The request's body, cached on the request as starlette does. Once it is over
    LARGE_BODY_MIN_BYTES its chunks go into one LargeBody: of the declared Content-Length
    (each chunk copied to its place), else grown chunk by chunk. Grown, a body is copied
    again at each reallocation that cannot stay in place: 8 concurrent 6.3 MB bodies read
    grown ran at 0.84-1.02x stock's throughput, placed at 1.31-1.53x."""
    if hasattr(request, "_body"):
        return request._body
    declared = request_body_size(request) or 0
    chunks, size, buffer, view = [], 0, None, None
    async for chunk in request.stream():
        end = size + len(chunk)
        if buffer is None and end > LARGE_BODY_MIN_BYTES and chunks:
            _start_release_thread()
            if declared >= end:
                buffer = _unzeroed_body(declared)
                view = memoryview(buffer)
                place = 0
                for part in chunks:
                    view[place : place + len(part)] = part
                    place += len(part)
            else:
                buffer = LargeBody()
                for part in chunks:
                    buffer += part
            chunks = None
        if buffer is None:
            chunks.append(chunk)
        elif view is not None and end <= len(buffer):
            view[size:end] = chunk
        else:
            if view is not None:  # more than declared (h11 refuses that): grow from here
                view.release()
                view = None
                del buffer[size:]
            buffer += chunk
        size = end
    if buffer is not None:
        if view is not None:
            view.release()
            del buffer[size:]  # less than declared: the stream ended early
        request._body = buffer
    elif len(chunks) == 1:
        request._body = chunks[0]  # no copy (a body delivered in one piece)
    else:
        request._body = b"".join(chunks)
    return request._body


async def parse_json(body) -> Any:
    """The body's JSON: a large body in a child process, a small one here."""
    if len(body) > LARGE_BODY_MIN_BYTES and LARGE_BODY_PARSER is not None:
        try:
            return await LARGE_BODY_PARSER.loads(body)
        except BodyQueueFull as error:
            from fastapi import HTTPException

            raise HTTPException(
                status_code=503, detail=f"server busy parsing bodies: {error}"
            ) from None
    return orjson.loads(memoryview(body))  # a LargeBody too (see JsonBodyParser._loads)
