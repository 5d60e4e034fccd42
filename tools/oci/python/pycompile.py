"""Byte-compiles Python sources of a staged image tree the way the image will import them.

Hash-based, unchecked .pyc: layers have mtime 0, which would make timestamp .pyc look stale
(imports then take twice as long), and the layer is immutable, so the interpreter need not
re-check the source. The recorded source path is the path inside the image (`-s ROOT -p /`),
not the build machine's. PYTHONHASHSEED=0 keeps the marshalled bytes stable.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path


class CompileError(Exception):
    """compileall could not run."""


def compile_tree(root: Path, rel_dirs: list[str], workers: int = 0, python: str | None = None) -> int:
    """Compiles every .py under root/<rel_dir>; returns how many sources failed to compile.

    Sources that are not valid Python 3.11 (templates, py2 leftovers in wheels) are reported by
    compileall and skipped; that is deterministic, so it is a count, not an error.
    """
    targets = [str(Path(root, d)) for d in rel_dirs if Path(root, d).is_dir()]
    if not targets:
        return 0
    cmd = [
        python or sys.executable, "-m", "compileall", "-q", "-q",
        "-j", str(workers), "--invalidation-mode", "unchecked-hash",
        "-s", str(root), "-p", "/", *targets,
    ]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONHASHSEED": "0", "LC_ALL": "C.UTF-8"}
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode not in (0, 1):
        raise CompileError(f"compileall failed (rc {proc.returncode}): {proc.stdout[-2000:]}")
    # With -qq compileall prints nothing; rc 1 means at least one source did not compile.
    return 0 if proc.returncode == 0 else 1


# ---- Compiling with the image's own interpreter ------------------------------------------------
#
# The CPython of the image's Debian runtime layer compiles the wheels' sources, so the bytecode
# comes from a declared input (the layer tar) and not from whatever python3 the build machine
# has. It runs straight from the unpacked layer through the layer's own dynamic loader; no
# container, no chroot. The sources are streamed to it over a pipe (see `serve`), so no tree of
# sources is staged either.

LOADER = "lib64/ld-linux-x86-64.so.2"
LIBRARY_DIRS = ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu")
PYTHON = "usr/bin/python3"


def _inside(root: Path, rel: str) -> Path:
    """`rel` under `root`, following symlinks as the image would (absolute targets stay inside)."""
    path = root
    for part in rel.split("/"):
        path = path / part
        hops = 0
        while path.is_symlink():
            hops += 1
            if hops > 16:
                raise CompileError(f"{rel}: symlink loop in the interpreter layer")
            target = os.readlink(path)
            path = root / target.lstrip("/") if target.startswith("/") else path.parent / target
    return path


def unpack_interpreter(layer: Path, dest: Path) -> list[str]:
    """Unpacks a Debian runtime layer tar into `dest`; returns the argv prefix that runs its python3."""
    import tarfile

    try:
        with tarfile.open(layer) as tar:
            members = [m for m in tar.getmembers()
                       if (m.isfile() or m.isdir() or m.issym()) and ".." not in m.name.split("/")
                       and not m.name.startswith("/")]
            # Nothing may be written through a symlink (an absolute one would point at the host).
            links = {m.name for m in members if m.issym()}
            through = [m.name for m in members if any(m.name.startswith(link + "/") for link in links)]
            if through:
                raise CompileError(f"{layer}: {through[0]} lies below a symlink; not unpacking it")
            tar.extractall(dest, members=members)
    except (OSError, tarfile.TarError) as err:
        raise CompileError(f"{layer}: cannot unpack the interpreter layer ({err})") from None
    loader, python = _inside(dest, LOADER), _inside(dest, PYTHON)
    for what, path in (("dynamic loader /" + LOADER, loader), ("interpreter /" + PYTHON, python)):
        if not path.is_file():
            raise CompileError(f"{layer}: no {what}; the interpreter layer must be the image's Debian runtime")
    libraries = ":".join(str(dest / d) for d in LIBRARY_DIRS)
    return [str(loader), "--library-path", libraries, str(python)]


class Compiler:
    """Compiles (image path, source) pairs with one interpreter: submit() each, then results().

    Same bytecode format as `compileall --invalidation-mode unchecked-hash -s ROOT -p /` with
    PYTHONHASHSEED=0; a source that does not compile is skipped (its result is None), as
    compileall skips it. marshal marks an object as shared by its refcount, which depends on
    what the compiling process compiled before; so the sources are cut, in submission order,
    into fixed batches and each batch is compiled by a fresh worker process: the bytes depend
    on the submission order only, never on how many workers ran or which finished first.
    """

    def __init__(self, argv: list[str], workers: int = 0, batch: int = 256) -> None:
        import queue
        import threading

        self._cmd = [*argv, "-S", "-s", "-B", str(Path(__file__).resolve()), "serve"]
        self._env = {"PYTHONHASHSEED": "0", "LC_ALL": "C.UTF-8"}
        self._batch_size = batch
        self._batch: list[tuple[str, bytes]] = []
        self._queue: queue.Queue = queue.Queue(maxsize=4)
        self._results: dict[str, bytes | None] = {}
        self._errors: list[str] = []
        self._tags: set[str] = set()
        self.cache_tag = self._probe_tag()
        self._threads = [threading.Thread(target=self._work, daemon=True) for _ in range(workers or os.cpu_count() or 1)]
        for t in self._threads:
            t.start()

    def _start(self) -> tuple[subprocess.Popen, str]:
        proc = subprocess.Popen(self._cmd, env=self._env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        assert proc.stdout is not None
        return proc, proc.stdout.readline().strip().decode(errors="replace")

    def _probe_tag(self) -> str:
        proc, tag = self._start()
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
        if proc.returncode != 0 or not tag.startswith("cpython-"):
            raise CompileError(f"{self._cmd[-3]} did not start as a compile worker (rc {proc.returncode}, said {tag!r})")
        return tag

    def _work(self) -> None:
        while (batch := self._queue.get()) is not None:
            if self._errors:
                continue
            proc, tag = self._start()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                if tag != self.cache_tag:
                    raise OSError(f"worker said {tag!r}, expected {self.cache_tag!r}")
                for path, source in batch:
                    name = path.encode()
                    proc.stdin.write(struct.pack(">II", len(name), len(source)) + name + source)
                    proc.stdin.flush()
                    (size,) = struct.unpack(">i", _read_exactly(proc.stdout, 4))
                    self._results[path] = None if size < 0 else _read_exactly(proc.stdout, size)
            except (OSError, struct.error, EOFError) as err:
                self._errors.append(f"compile worker failed on the batch starting at {batch[0][0]} ({err})")
            finally:
                proc.stdin.close()
                proc.wait()

    def submit(self, image_path: str, source: bytes) -> None:
        if self._errors:
            raise CompileError(self._errors[0])
        self._batch.append((image_path, source))
        if len(self._batch) == self._batch_size:
            self._queue.put(self._batch)
            self._batch = []

    def pyc_path(self, source_path: str) -> str:
        """dir/x.py -> dir/__pycache__/x.<cache tag>.pyc"""
        head, _, name = source_path.rpartition("/")
        return f"{head}/__pycache__/{name[:-3]}.{self.cache_tag}.pyc"

    def results(self) -> dict[str, bytes | None]:
        if self._batch:
            self._queue.put(self._batch)
            self._batch = []
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join()
        if self._errors:
            raise CompileError("; ".join(self._errors[:3]))
        return self._results


def _read_exactly(stream, size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise EOFError(f"expected {size} bytes, got {len(data)}")
    return data


def serve() -> int:
    """Worker loop (run by the compiling interpreter): frames of (path, source) in, .pyc out."""
    import importlib._bootstrap_external as bootstrap
    import importlib.util
    import warnings

    warnings.simplefilter("ignore")  # SyntaxWarnings of third-party sources; compileall -qq hides them too
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    out.write(sys.implementation.cache_tag.encode() + b"\n")
    out.flush()
    while header := inp.read(8):
        name_len, source_len = struct.unpack(">II", header)
        path = inp.read(name_len).decode()
        source = inp.read(source_len)
        try:
            code = compile(source, path, "exec", dont_inherit=True)
            pyc = bytes(bootstrap._code_to_hash_pyc(code, importlib.util.source_hash(source), checked=False))
        except Exception:  # noqa: BLE001 - compileall skips any source that does not compile
            out.write(struct.pack(">i", -1))
        else:
            out.write(struct.pack(">i", len(pyc)) + pyc)
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(serve() if sys.argv[1:] == ["serve"] else 2)
