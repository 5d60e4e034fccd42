"""pyroot.py on small wheels made here: installer's layout, RECORD as installed, pruning, .pyc."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import marshal
import posixpath
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tools.oci import ocitar
from tools.oci.python import pycompile, pyroot

SITE = "usr/lib/python3/dist-packages"


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(directory: Path, name: str = "demo", version: str = "1.0") -> Path:
    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": b"VALUE = {'a', 'b'}\n",
        f"{name}/broken.py": b"def (:\n",  # not Python: compileall skips it, so must we
        f"{name}/gpu/kernel.so": b"\x7fELF gpu only",
        f"{name}-{version}.data/scripts/tool": b"#!python\nprint('tool')\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist}/entry_points.txt": f"[console_scripts]\n{name}-cli = {name}:main\n".encode(),
    }
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items()) + f"{dist}/RECORD,,\n"
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, data in files.items():
            zf.writestr(path, data)
        zf.writestr(f"{dist}/RECORD", record)
    return wheel


def read_layer(tar_path: Path) -> dict[str, tuple[tarfile.TarInfo, bytes]]:
    out = {}
    with tarfile.open(tar_path) as tar:
        for m in tar:
            out[m.name] = (m, tar.extractfile(m).read() if m.isfile() else b"")
    return out


@pytest.fixture
def built(tmp_path: Path):
    wheel = make_wheel(tmp_path)
    out = tmp_path / "layer.tar"
    digest, scripts, failed = pyroot.build_layer([wheel], ["demo/gpu"], [sys.executable], out)
    return wheel, out, digest, scripts, failed


def test_layout_record_and_scripts(built) -> None:
    _, out, _, scripts, failed = built
    layer = read_layer(out)
    assert scripts == ["demo-cli", "tool"] and failed == 1
    assert f"{SITE}/demo/gpu/kernel.so" not in layer and not any("/gpu" in p for p in layer)
    record_text = layer[f"{SITE}/demo-1.0.dist-info/RECORD"][1].decode()
    rows = {row[0]: row for row in csv.reader(io.StringIO(record_text))}
    # Every RECORD row is a file of the layer at that path (relative to dist-packages), with its hash.
    assert "../../../local/bin/demo-cli" in rows and "../../../local/bin/tool" in rows
    assert not any("gpu" in path for path in rows), "pruned files must leave RECORD too"
    for path, hash_, size in rows.values():
        layer_path = posixpath.normpath(posixpath.join(SITE, path))
        assert layer_path in layer, f"RECORD lists {path}, the layer has no {layer_path}"
        if hash_:
            assert _record_hash(layer[layer_path][1]) == hash_ and int(size) == len(layer[layer_path][1])
    cli_info, cli = layer["usr/local/bin/demo-cli"]
    assert cli.startswith(b"#!/usr/bin/python3\n") and cli_info.mode == 0o755
    assert layer["usr/local/bin/tool"][1] == b"#!/usr/bin/python3\nprint('tool')\n"
    assert layer[f"{SITE}/demo-1.0.dist-info/INSTALLER"][1] == b"installer\n"
    for info, _ in layer.values():
        assert info.mtime == 0 and info.uid == info.gid == 0 and info.uname == info.gname == ""
    assert list(layer) == sorted(layer)


def test_pyc_is_unchecked_hash_with_the_image_path(built) -> None:
    _, out, _, _, _ = built
    layer = read_layer(out)
    tag = sys.implementation.cache_tag
    pyc = layer[f"{SITE}/demo/__pycache__/__init__.{tag}.pyc"][1]
    assert int.from_bytes(pyc[4:8], "little") == 0b01  # hash-based, unchecked
    assert marshal.loads(pyc[16:]).co_filename == f"/{SITE}/demo/__init__.py"
    assert f"{SITE}/demo/__pycache__/broken.{tag}.pyc" not in layer


def test_two_builds_are_byte_identical(built, tmp_path: Path) -> None:
    wheel, _, digest, _, _ = built
    again = pyroot.build_layer([wheel], ["demo/gpu"], [sys.executable], tmp_path / "again.tar")[0]
    assert again == digest


def test_missing_prune_path_and_unlocked_wheel_are_errors(built, tmp_path: Path) -> None:
    wheel = built[0]
    with pytest.raises(pyroot.WheelError, match="--prune paths not found"):
        pyroot.build_layer([wheel], ["demo/nothing"], [sys.executable], tmp_path / "x.tar")
    locked = [{"name": "demo", "version": "1.0", "sha256": "0" * 64}]
    with pytest.raises(pyroot.WheelError, match="is not in lock"):
        pyroot.check_hashes([wheel], locked, "lock")
    locked[0]["sha256"] = ocitar.hash_file(wheel).sha256
    pyroot.check_hashes([wheel], locked, "lock")
    with pytest.raises(pyroot.WheelError, match="no such wheel"):
        pyroot.check_hashes([], locked, "lock")


def test_parts_split_the_wheels_by_the_other_lock(tmp_path: Path) -> None:
    """shared: the wheels both locks pin to the same sha256; own: the rest; together all of them."""
    common, mine = make_wheel(tmp_path, "common"), make_wheel(tmp_path, "mine")
    digests = pyroot.check_hashes([common, mine], locked := [
        {"name": n, "version": "1.0", "sha256": ocitar.hash_file(w).sha256} for n, w in (("common", common), ("mine", mine))
    ], "lock")
    other = [locked[0], {"name": "mine", "version": "2.0", "sha256": "f" * 64}]
    assert pyroot.select_part(digests, locked, other, "shared", "other") == ([common], [locked[0]])
    assert pyroot.select_part(digests, locked, other, "own", "other") == ([mine], [locked[1]])
    assert pyroot.select_part(digests, locked, [], "all", "other") == (sorted([common, mine]), locked)
    with pytest.raises(pyroot.WheelError, match="no wheel is shared with other"):
        pyroot.select_part(digests, locked, other[1:], "shared", "other")


def test_a_part_without_the_other_lock_is_a_usage_error(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit):
        pyroot.main(["--lock", "l", "--interpreter-layer", "i", "--out", "o", "--out-descriptor", "d",
                     "--out-manifest", "m", "--part", "shared"])
    assert "--part shared or own needs --shared-with" in capsys.readouterr().err


def test_compiler_output_depends_on_order_only(tmp_path: Path) -> None:
    sources = [(f"/m/mod{i}.py", f"X{i} = {{'k{i}', 'shared'}}\ndef f(): return 'shared{i % 3}'\n".encode())
               for i in range(40)]
    runs = []
    for workers in (1, 3):
        compiler = pycompile.Compiler([sys.executable], workers=workers, batch=7)
        for path, source in sources:
            compiler.submit(path, source)
        runs.append(compiler.results())
    assert runs[0] == runs[1] and len(runs[0]) == 40 and all(runs[0].values())


def test_interpreter_layer_without_python_is_refused(tmp_path: Path) -> None:
    layer = tmp_path / "empty.tar"
    ocitar.write_layer([ocitar.Entry("etc/hostname", "file", 0o644, data=b"x\n")], layer)
    with pytest.raises(pycompile.CompileError, match="no dynamic loader"):
        pycompile.unpack_interpreter(layer, tmp_path / "root")


def test_interpreter_layer_writing_through_a_symlink_is_refused(tmp_path: Path) -> None:
    layer = tmp_path / "evil.tar"
    with tarfile.open(layer, "w") as tar:
        link = tarfile.TarInfo("lib")
        link.type, link.linkname = tarfile.SYMTYPE, str(tmp_path / "outside")
        tar.addfile(link)
        tar.addfile(tarfile.TarInfo("lib/x"), io.BytesIO(b""))
    with pytest.raises(pycompile.CompileError, match="below a symlink"):
        pycompile.unpack_interpreter(layer, tmp_path / "root")
    assert not (tmp_path / "outside").exists()
