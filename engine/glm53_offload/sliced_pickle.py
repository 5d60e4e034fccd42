"""The scheduler frame of a request, built off the event loop without one long GIL hold.

SGLang's sock_send pickles a request inside the send call; for a multi-MB prompt that is one
GIL-holding native call (the UTF-8 encode of the text, the copy of the ids array). sock_encode
returns the same frame as bytes, so a preprocessing lane can build it and the loop only sends
it; with sliced=True (pickle IPC) it is built in steps that offer the GIL between them. The
scheduler's plain pickle.loads / sock_recv reads either form: nothing of ours is needed there.
"""

from __future__ import annotations

import pickle
import time
from array import array
from typing import Any, Union

# Bytes per step when a large pickled payload is copied into the message.
_ENCODE_SLICE_BYTES = 1 << 20
# Characters per step when a large string is pickled: pickle encodes a string
# to UTF-8 in one call (15 ms for a 4.7 MB non-ASCII prompt).
_ENCODE_SLICE_CHARS = 256 * 1024


class _SlicedWriter:
    """A pickler's output file that appends a large write a slice at a time,
    offering the GIL to other threads between slices."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        for start in range(0, len(view), _ENCODE_SLICE_BYTES):
            if start:
                time.sleep(0)  # releases the GIL: a waiting thread runs now
            self.buffer += view[start : start + _ENCODE_SLICE_BYTES]
        return len(view)


class _SlicedPickler(pickle.Pickler):
    def __init__(self, file, request_type: type) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.request_type = request_type

    def reducer_override(self, obj):
        # array.__reduce_ex__ copies the whole buffer in one call; as an
        # in-band buffer it reaches the writer uncopied (and loads the same).
        if type(obj) is array:
            return array, (obj.typecode, pickle.PickleBuffer(obj))
        # pickle never asks this method about a str: a request's large
        # string fields go as _JoinedSlices in its reduced form.
        if isinstance(obj, self.request_type):
            return _with_joined_slices(obj.__reduce_ex__(pickle.HIGHEST_PROTOCOL))
        return NotImplemented


def _with_joined_slices(part):
    """`part` of a reduced request with each large string in it (in tuples
    and dicts, as msgspec's reduce nests the fields) as _JoinedSlices."""
    if type(part) is tuple:
        return tuple(map(_with_joined_slices, part))
    if type(part) is dict:
        return {key: _with_joined_slices(value) for key, value in part.items()}
    if type(part) is str and len(part) > _ENCODE_SLICE_CHARS:
        return _JoinedSlices(part)
    return part


class _JoinedSlices:
    """A large string pickled as the join of its slices, each encoded in its
    own step; it loads as the same string, with no code of ours needed."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __reduce__(self):
        text, step = self.text, _ENCODE_SLICE_CHARS
        return "".join, ([text[i : i + step] for i in range(0, len(text), step)],)


def sock_encode(obj: Any, sliced: bool = False) -> Union[bytes, bytearray]:
    """The one frame SGLang's sock_send sends for obj (the same bytes), so a
    caller can serialize off the event loop and send them later; sock_recv
    reads either form. `sliced` (pickle IPC): built without one long
    GIL-holding copy, for a lane serializing a multi-MB request."""
    from sglang.srt.managers import io_struct

    if not io_struct._USE_PICKLE_IPC:
        return io_struct.msgpack_encode(obj)
    if not sliced:
        # What socket.send_pyobj(obj, protocol=HIGHEST_PROTOCOL) sends.
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    writer = _SlicedWriter()
    _SlicedPickler(writer, io_struct.BaseReq).dump(obj)
    return writer.buffer
