"""The Python-packages layer of a base image: hash-locked wheels installed into dist-packages.

PyPA's `installer` (hash-locked in //third_party/python:tools.lock) unpacks each wheel, writes
its console-script wrappers and its RECORD; the destination here writes nothing to disk: every
file becomes a layer entry whose content is read from the wheel again when the tar is written
(sorted, mtime 0, uid/gid 0), so no multi-GB staging tree exists. Schemes, as in the image:

    purelib, platlib, data   /usr/lib/python3/dist-packages       (data as `pip --target` put it)
    scripts                  /usr/local/bin   (wrappers' shebang /usr/bin/python3)
    headers                  /usr/lib/python3/dist-packages/include/site/python3.11/<dist>

RECORD lists every file where it is in the layer (scripts as ../../../local/bin/<name>), minus
the paths removed by --prune (triton's CUDA/AMD binaries: ~470 MB that CPU imports never load).
Each wheel file must hash to its lock line. The .py files under dist-packages get unchecked-hash
.pyc compiled by the image's own CPython, unpacked from --interpreter-layer (the Debian runtime
layer; tools/oci/python/pycompile.py). Output: the layer tar, its descriptor and a manifest of the wheels.

Two bases whose locks share most wheels split them: `--part shared --shared-with OTHER_LOCK`
installs only the wheels both locks pin to the same sha256 (one layer, built, stored and
imported once for both images), `--part own` the rest of this lock.
"""

from __future__ import annotations

import argparse
import io
import posixpath
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from installer import install
from installer.destinations import SchemeDictionaryDestination
from installer.records import Hash, RecordEntry
from installer.scripts import Script
from installer.sources import WheelFile
from installer.utils import Scheme, copyfileobj_with_hashing

from tools.oci import ocitar
from tools.oci.ocilayout import LayerDescriptor, write_canonical
from tools.oci.python import pycompile

SITE = "usr/lib/python3/dist-packages"
BIN = "usr/local/bin"
INTERPRETER = "/usr/bin/python3"
# installer writes these into each .dist-info (pip wrote "pip" and an empty REQUESTED).
METADATA = {"INSTALLER": b"installer\n", "REQUESTED": b""}


class WheelError(Exception):
    """The wheels cannot be installed as locked."""


def parse_lock(text: str, where: str) -> list[dict[str, str]]:
    """name, version, sha256 of every `name==version --hash=sha256:...` line."""
    out = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#") or line.startswith("--"):
            continue
        parts = line.split()
        if "==" not in parts[0]:
            raise WheelError(f"{where}:{lineno}: expected name==version --hash=sha256:..., got {line!r}")
        name, version = parts[0].split("==", 1)
        hashes = [p.split(":", 1)[1] for p in parts[1:] if p.startswith("--hash=sha256:")]
        if len(hashes) != 1:
            raise WheelError(f"{where}:{lineno}: {name} needs exactly one --hash=sha256:<64 hex>; relock")
        out.append({"name": name, "version": version, "sha256": hashes[0]})
    return out


def check_hashes(wheels: list[Path], locked: list[dict[str, str]], lock_name: str) -> dict[Path, str]:
    """Every wheel hashes to a lock line and every lock line has its wheel (pip's --require-hashes).
    Returns each wheel's sha256."""
    by_hash = {w["sha256"]: w for w in locked}
    digests = {}
    for wheel in wheels:
        digest = ocitar.hash_file(wheel).sha256
        if digest not in by_hash:
            raise WheelError(f"{wheel.name} (sha256 {digest}) is not in {lock_name}; refetch "
                             "(`./tools/bazel sync --only=<repo>`) or relock")
        digests[wheel] = digest
    seen = set(digests.values())
    missing = [f"{w['name']}=={w['version']}" for w in locked if w["sha256"] not in seen]
    if missing:
        raise WheelError(f"{lock_name} locks {missing} but no such wheel was given (--wheel)")
    return digests


PARTS = ("all", "shared", "own")


def select_part(digests: dict[Path, str], locked: list[dict[str, str]], other: list[dict[str, str]],
                part: str, other_name: str) -> tuple[list[Path], list[dict[str, str]]]:
    """The wheels (and their lock lines) of one part: `shared`, the ones `other` locks too with
    the same sha256 (byte-identical, so one layer serves both bases); `own`, the rest; `all`."""
    if part == "all":
        return sorted(digests), locked
    in_other = {w["sha256"] for w in other}
    keep = {w["sha256"] for w in locked if (w["sha256"] in in_other) == (part == "shared")}
    if not keep:
        raise WheelError(f"no wheel is {part} with {other_name}; build this layer with part = \"all\"")
    return sorted(w for w, d in digests.items() if d in keep), [w for w in locked if w["sha256"] in keep]


def pruned(path: str, prune: Iterable[str]) -> str | None:
    """The --prune entry that removes layer path `path`, if any."""
    for rel in prune:
        top = f"{SITE}/{rel}"
        if path == top or path.startswith(top + "/"):
            return rel
    return None


@dataclass
class Layer:
    """What the wheels put into the layer, by layer path, and the .pyc being compiled."""

    prune: list[str]
    compiler: pycompile.Compiler
    entries: dict[str, ocitar.Entry] = field(default_factory=dict)
    owners: dict[str, str] = field(default_factory=dict)
    pruned_hits: set[str] = field(default_factory=set)

    def add(self, entry: ocitar.Entry, wheel: str, source: bytes | None) -> None:
        if entry.path in self.entries:
            raise WheelError(f"{wheel} and {self.owners[entry.path]} both install /{entry.path}")
        self.entries[entry.path] = entry
        self.owners[entry.path] = wheel
        if source is not None:
            self.compiler.submit("/" + entry.path, source)


class LayerDestination(SchemeDictionaryDestination):
    """installer's scheme destination, writing layer entries instead of files."""

    def __init__(self, layer: Layer, wheel: zipfile.ZipFile, wheel_name: str, distribution: str) -> None:
        super().__init__(
            scheme_dict={
                "purelib": "/" + SITE,
                "platlib": "/" + SITE,
                "data": "/" + SITE,
                "scripts": "/" + BIN,
                "headers": f"/{SITE}/include/site/python3.11/{distribution}",
            },
            interpreter=INTERPRETER,
            script_kind="posix",
        )
        self.layer, self.wheel, self.wheel_name = layer, wheel, wheel_name

    def layer_path(self, scheme: Scheme, path: str) -> str:
        base = self.scheme_dict[scheme].strip("/")
        full = posixpath.normpath(posixpath.join(base, path))
        if not full.startswith(base + "/"):
            raise WheelError(f"{self.wheel_name}: {path!r} would be written outside {base}")
        return full

    def write_to_fs(self, scheme: Scheme, path: str, stream: BinaryIO, is_executable: bool) -> RecordEntry:
        target = self.layer_path(scheme, path)
        hit = pruned(target, self.layer.prune)
        if hit is not None:
            self.layer.pruned_hits.add(hit)
            return RecordEntry(path, None, None)
        compile_it = target.startswith(SITE + "/") and target.endswith(".py")
        member = stream.name if isinstance(stream, zipfile.ZipExtFile) else None
        sink = io.BytesIO() if compile_it or member is None else _Discard()
        digest, size = copyfileobj_with_hashing(stream, sink, "sha256")
        mode = ocitar.EXEC_MODE if is_executable else ocitar.FILE_MODE
        if member is not None:
            entry = ocitar.Entry(target, "file", mode, opener=_opener(self.wheel, member), length=size)
        else:
            entry = ocitar.Entry(target, "file", mode, data=sink.getvalue())
        self.layer.add(entry, self.wheel_name, sink.getvalue() if compile_it else None)
        return RecordEntry(path, Hash("sha256", digest), size)

    def write_script(self, name: str, module: str, attr: str, section: Any) -> RecordEntry:
        script_name, data = Script(name, module, attr, section).generate(self.interpreter, self.script_kind)
        return self.write_to_fs(Scheme("scripts"), script_name, io.BytesIO(data), is_executable=True)

    def finalize_installation(self, scheme: Scheme, record_file_path: str,
                              records: Iterable[tuple[Scheme, RecordEntry]]) -> None:
        kept = [(s, r) for s, r in records if pruned(self.layer_path(s, r.path), self.layer.prune) is None]
        super().finalize_installation(scheme, record_file_path, kept)


class _Discard(io.RawIOBase):
    def write(self, data: Any) -> int:
        return len(data)


def _opener(wheel: zipfile.ZipFile, member: str):
    return lambda: wheel.open(member)


def build_layer(wheels: list[Path], prune: list[str], interpreter_argv: list[str], out: Path) -> tuple[ocitar.Digest, list[str], int]:
    """Writes the layer; returns its digest, the script names and how many sources did not compile."""
    opened = [zipfile.ZipFile(w) for w in sorted(wheels, key=lambda p: p.name)]
    try:
        layer = Layer(prune, pycompile.Compiler(interpreter_argv))
        try:
            for zf, path in zip(opened, sorted(wheels, key=lambda p: p.name)):
                source = WheelFile(zf)
                try:
                    source.validate_record(validate_contents=False)
                    install(source, LayerDestination(layer, zf, path.name, source.distribution), METADATA)
                except WheelError:
                    raise
                except Exception as err:  # installer's errors have no common base class
                    raise WheelError(f"{path.name}: installer refused the wheel: {err}") from None
        finally:
            results = layer.compiler.results()
        missing = [p for p in prune if p not in layer.pruned_hits]
        if missing:
            raise WheelError(f"--prune paths not found under {SITE}: {missing}; fix the BUILD file's prune list")
        failed = 0
        for source_path, pyc in results.items():
            if pyc is None:
                failed += 1
                continue
            target = layer.compiler.pyc_path(source_path.lstrip("/"))
            layer.add(ocitar.Entry(target, "file", ocitar.FILE_MODE, data=pyc), "the compiler", None)
        scripts = sorted(p.rsplit("/", 1)[1] for p in layer.entries if p.startswith(BIN + "/"))
        return ocitar.write_layer(layer.entries.values(), out), scripts, failed
    finally:
        for zf in opened:
            zf.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lock", type=Path, required=True, help="pip --require-hashes lock")
    p.add_argument("--wheel", type=Path, action="append", default=[], help="a locked wheel file (repeat)")
    p.add_argument("--prune", action="append", default=[], help="path under dist-packages to delete")
    p.add_argument("--part", choices=PARTS, default="all",
                   help="shared: only the wheels --shared-with also locks (same sha256); own: the rest")
    p.add_argument("--shared-with", type=Path, help="the other base's lock (with --part shared or own)")
    p.add_argument("--interpreter-layer", type=Path, required=True,
                   help="the image's Debian runtime layer tar; its /usr/bin/python3 compiles the .pyc")
    p.add_argument("--created-by", default="python wheels")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--out-descriptor", type=Path, required=True)
    p.add_argument("--out-manifest", type=Path, required=True)
    args = p.parse_args(argv)
    if (args.part == "all") != (args.shared_with is None):
        p.error("--part shared or own needs --shared-with LOCK, and --shared-with needs one of them")
    try:
        wheels = parse_lock(args.lock.read_text(), str(args.lock))
        digests = check_hashes(args.wheel, wheels, str(args.lock))
        other = parse_lock(args.shared_with.read_text(), str(args.shared_with)) if args.shared_with else []
        paths, wheels = select_part(digests, wheels, other, args.part, str(args.shared_with))
        with tempfile.TemporaryDirectory(prefix="pyroot-") as tmp:
            interpreter = pycompile.unpack_interpreter(args.interpreter_layer, Path(tmp))
            digest, scripts, _ = build_layer(paths, args.prune, interpreter, args.out)
        desc = LayerDescriptor.uncompressed(digest.digest, digest.size, args.created_by)
        desc.write(args.out_descriptor)
        manifest: dict[str, Any] = {
            "kind": "python-wheels",
            "site": "/" + SITE,
            "wheels": wheels,
            "scripts": scripts,
            "pruned": args.prune,
            "layer": desc.to_json(),
        }
        write_canonical(args.out_manifest, manifest)
    except (WheelError, ocitar.LayerError, pycompile.CompileError, OSError) as e:
        print(f"pyroot.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
