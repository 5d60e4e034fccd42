"""The package on the host, without SGLang: the version check, the unpickling allowlist, the
segment owner and sweep on the real /dev/shm, the call deadlines and the stall dump on a real
event loop. The child protocol with SGLang's tokenizer and processors runs in the v3 image
(patches/v3/tests)."""

from __future__ import annotations

import asyncio
import ctypes
import io
import os
import pickle
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest

from glm53_offload import offload_process, sglang_support, stall_dump


def _fake_sglang(missing: str = "", version: str = "0.5.19"):
    modules = {}
    for module_name, names in sglang_support.USES[version].items():
        modules[module_name] = types.SimpleNamespace(**{n: object() for n in names if f"{module_name}.{n}" != missing})
    return modules.__getitem__


@pytest.mark.parametrize("version", sglang_support.SUPPORTED)
def test_each_supported_sglang_with_every_name_passes(version):
    sglang_support.check(version, import_module=_fake_sglang(version=version))


def test_an_unlisted_version_is_refused_naming_it_and_the_table():
    with pytest.raises(
        sglang_support.UnsupportedSGLang, match=r"supports SGLang 0\.5\.19, 0\.5\.23, not 0\.5\.24.*USES"
    ):
        sglang_support.check("0.5.24", import_module=_fake_sglang())


def test_every_supported_version_states_what_its_stock_conversion_does():
    assert set(sglang_support.STOCK_CONVERTS_OFF_LOOP) == set(sglang_support.SUPPORTED)
    with pytest.raises(
        sglang_support.UnsupportedSGLang, match=r"not 0\.5\.24.*STOCK_CONVERTS_OFF_LOOP"
    ):
        sglang_support.stock_converts_off_loop("0.5.24")


def test_a_missing_hook_is_refused_naming_it():
    missing = "sglang.srt.managers.mm_utils.wrap_shm_features"
    with pytest.raises(sglang_support.UnsupportedSGLang, match=missing.replace(".", r"\.")):
        sglang_support.check("0.5.19", import_module=_fake_sglang(missing))


def test_a_missing_module_is_refused_naming_it():
    def import_module(name):
        raise ModuleNotFoundError(f"No module named {name!r}")

    with pytest.raises(sglang_support.UnsupportedSGLang, match="sglang.srt.environ"):
        sglang_support.check("0.5.19", import_module=import_module)


def test_tokenizer_caches_are_filled_for_the_version_and_their_functions_are_checked():
    module, function = sglang_support.TOKENIZER_CACHES["0.5.23"][0]
    assert function in sglang_support.USES["0.5.23"][module]
    filled = []
    modules = {module: types.SimpleNamespace(**{function: filled.append})}
    tokenizer = object()

    assert sglang_support.fill_tokenizer_caches(tokenizer, "0.5.23", modules.__getitem__) == 1
    assert filled == [tokenizer]
    assert sglang_support.fill_tokenizer_caches(tokenizer, "0.5.19", modules.__getitem__) == 0


def test_a_tokenizer_cache_that_fails_is_logged_and_left_to_sglang(caplog):
    module, function = sglang_support.TOKENIZER_CACHES["0.5.23"][0]

    def fails(tokenizer):
        raise RuntimeError("no plan")

    modules = {module: types.SimpleNamespace(**{function: fails})}
    assert sglang_support.fill_tokenizer_caches(object(), "0.5.23", modules.__getitem__) == 0
    assert f"{module}.{function} failed" in caplog.text


class _Exploit:
    def __reduce__(self):
        return (os.system, ("true",))


def test_a_childs_answer_naming_a_global_outside_the_allowlist_is_refused():
    with pytest.raises(pickle.UnpicklingError, match=r"posix\.system|os\.system"):
        offload_process._PersistentStrings(io.BytesIO(pickle.dumps(_Exploit())), [], {}).load()


def test_a_childs_answer_gets_its_big_strings_back_by_persistent_id():
    buffer = io.BytesIO()
    big = "x" * (offload_process._BIG_STRING_CHARS + 1)
    pickler = offload_process._BigStringsOut(buffer)
    pickler.dump({"prompt": big, "n": 1})
    assert pickler.strings == [big] and big.encode() not in buffer.getvalue()
    loaded = offload_process._PersistentStrings(io.BytesIO(buffer.getvalue()), pickler.strings).load()
    assert loaded == {"prompt": big, "n": 1}


def test_a_placeholder_pickles_as_the_in_place_string_it_stands_for():
    """The JSON child's placeholders (marker + index) become ids -1 - index; the parent puts the
    string it read from the body there. A text that only looks like one stays text."""
    marker = "\x00" + "ab" * 16 + ":"
    big = "y" * (offload_process._BIG_STRING_CHARS + 1)
    buffer = io.BytesIO()
    pickler = offload_process._InPlaceStringsOut(buffer, marker)
    pickler.dump({"images": [marker + "1", marker + "0"], "text": big, "fake": "\x00ab:0"})
    loaded = offload_process._PersistentStrings(
        io.BytesIO(buffer.getvalue()), pickler.strings, in_place=["first", "second"]).load()
    assert loaded == {"images": ["second", "first"], "text": big, "fake": "\x00ab:0"}


def _recorded_copies(monkeypatch) -> list:
    """The lengths of offload_process's memmove copies, the real copies still made."""
    copies = []

    def memmove(target, source, size):
        copies.append(size)
        return ctypes.memmove(target, source, size)

    monkeypatch.setattr(offload_process, "_memmove", memmove)
    return copies


def test_an_in_place_string_is_copied_a_slice_at_a_time_with_the_gil_released(monkeypatch):
    """A base64 image read from the body: built by copies of at most one slice each, by a
    foreign call that releases the GIL (CFUNCTYPE, not PYFUNCTYPE), so the event loop runs
    between and during them; the text equals str()'s, at offsets that cross slice bounds."""
    slice_bytes = offload_process._SLICE_BYTES
    body = bytes(range(32, 127)) * ((3 * slice_bytes + slice_bytes // 2) // 95 + 2)
    view = memoryview(body)
    start, end = 7, 7 + 3 * slice_bytes + slice_bytes // 2
    copies = _recorded_copies(monkeypatch)
    before = offload_process.STATS.snapshot()

    text = offload_process.ascii_text(view, start, end)

    assert text == body[start:end].decode("ascii") and type(text) is str
    assert copies == [slice_bytes] * 3 + [slice_bytes // 2], copies
    assert not ctypes.memmove._flags_ & ctypes._FUNCFLAG_PYTHONAPI
    after = offload_process.STATS.snapshot()
    assert after.get("json_process.strings_in_place_sliced", 0) == \
        before.get("json_process.strings_in_place_sliced", 0) + 1


def test_an_ascii_string_is_viewed_in_place_and_a_non_ascii_one_is_not():
    """The view is the str's own bytes (its address is inside the str object), not a copy."""
    text = "".join(chr(32 + i % 95) for i in range(3 * 1024 * 1024))
    view = offload_process.ascii_bytes(text)

    assert view is not None and view.readonly and bytes(view) == text.encode("ascii")
    assert id(text) < ctypes.addressof(view.obj) < id(text) + sys.getsizeof(text)
    assert offload_process.ascii_bytes("caf\u00e9 " * 100_000) is None


@pytest.mark.parametrize("start,end", [(-1, 10), (5, 4), (0, 1 << 21)])
def test_a_span_outside_the_body_is_refused(start, end):
    with pytest.raises(offload_process.OffloadProcessError, match=f"bytes {start}-{end} of a 4096-byte body"):
        offload_process.ascii_text(memoryview(b"a" * 4096), start, end)


def test_a_span_over_a_non_ascii_byte_is_refused_naming_it():
    """A child decodes untrusted bytes: a span it names is checked, never trusted to be ASCII."""
    body = b"a" * 3_000_000 + b"\xc3\xa9" + b"a" * 10
    with pytest.raises(offload_process.OffloadProcessError, match="byte 3000000 is not"):
        offload_process.ascii_text(memoryview(body), 0, len(body))


def test_deadlines_grow_with_the_payload():
    small, big = offload_process.deadline_for(0), offload_process.deadline_for(64 << 20)
    assert small == pytest.approx(offload_process.DEADLINE_BASE_S)
    assert big == pytest.approx(offload_process.DEADLINE_BASE_S + 64 * offload_process.DEADLINE_S_PER_MB)


def test_a_dead_owners_segments_are_swept_and_a_live_owners_are_kept(tmp_path):
    shm = tmp_path  # the same code runs on /dev/shm; a private directory keeps tests apart
    live = offload_process.SegmentOwner(str(shm))
    (shm / (live.prefix("mm") + "a")).write_bytes(b"1" * 10)
    script = (
        "import sys; from glm53_offload import offload_process as o; "
        "owner = o.SegmentOwner(sys.argv[1]); "
        "open(sys.argv[1] + '/' + owner.prefix('mm') + 'b', 'wb').write(b'2' * 20); "
        "print(owner.token, flush=True)"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    dead = subprocess.run([sys.executable, "-c", script, str(shm)], capture_output=True, text=True, env=env, check=True)
    token = dead.stdout.strip()
    assert any(token in p.name for p in shm.iterdir() if p.name.startswith("sgl_shm_mm_"))
    assert offload_process.sweep_dead_owners(str(shm)) == (1, 20)
    left = sorted(p.name for p in shm.iterdir())
    assert left == sorted([Path(live.path).name, live.prefix("mm") + "a"])


def test_the_real_dev_shm_takes_an_owner_file():
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    owner = offload_process.SegmentOwner()
    try:
        assert Path(owner.path).parent == Path("/dev/shm")
        offload_process.sweep_dead_owners()
        assert Path(owner.path).exists()  # alive: a sweep of the real /dev/shm keeps it
    finally:
        os.unlink(owner.path)


def test_chosen_segment_names_hold_for_their_thread_and_block_only():
    """A multimodal child names its segments with its call's prefix (segment_names); the
    choice is the calling thread's, and ends with the block."""
    chosen, seen_elsewhere = iter(["sgl_shm_mmproc1_t_0", "sgl_shm_mmproc1_t_1"]), []
    with offload_process.segment_names(chosen):
        first = offload_process.owned_segment_name("mm")
        other = threading.Thread(
            target=lambda: seen_elsewhere.append(getattr(offload_process._chosen_names, "names", None)))
        other.start()
        other.join()
        second = offload_process.owned_segment_name("mm")

    assert (first, second) == ("sgl_shm_mmproc1_t_0", "sgl_shm_mmproc1_t_1")
    assert seen_elsewhere == [None]
    assert offload_process._chosen_names.names is None


def test_the_stall_dump_names_the_blocking_frame(monkeypatch, capfd):
    """A loop blocked until the dump was written: released by the dump, not by a clock."""
    monkeypatch.setenv("SGLANG_EVENT_LOOP_STALL_DUMP_SECS", "2")
    dumped = threading.Event()
    real_write = os.write

    def write(fd, data):
        if fd == 2 and b"end of dump 1" in data:
            dumped.set()
        return real_write(fd, data)

    monkeypatch.setattr(stall_dump.os, "write", write)

    async def main():
        dumper = stall_dump.install(asyncio.get_running_loop())
        assert dumper is not None
        await asyncio.sleep(0)
        try:
            _blocked_until_dumped(dumped)
        finally:
            dumper.stop()

    asyncio.run(main())
    err = capfd.readouterr().err
    assert "[event-loop-stall]" in err
    assert "_blocked_until_dumped" in err


def _blocked_until_dumped(dumped: threading.Event) -> None:
    assert dumped.wait(120), "no stall dump within 120 s"
