"""Test fixture: small OCI layouts built from the host's own Python, pytest and a fake sglang.

The in-image runner needs an image with python3 and pytest; building the real CPU base takes
minutes, so these tests assemble one from the host interpreter (Debian's python3.11, the same
one the CPU base carries) in about a second.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from tools.oci import ocilayout

HOST_PYTHON = "/usr/bin/python3"
_PY_PACKAGES = ("pytest", "_pytest", "pluggy", "iniconfig", "packaging", "pygments", "py")
_STDLIB_SKIP = {"test", "idlelib", "tkinter", "lib2to3", "ensurepip", "turtledemo", "__pycache__"}


def _needed_libs(paths: list[Path]) -> set[Path]:
    libs: set[Path] = set()
    for path in paths:
        done = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=False)
        for line in done.stdout.splitlines():
            parts = line.split()
            if "=>" in parts and len(parts) >= 3 and parts[2].startswith("/"):
                libs.add(Path(parts[2]))
            elif parts and parts[0].startswith("/"):
                libs.add(Path(parts[0]))
    return libs


def python_rootfs(dest: Path) -> Path:
    """A minimal rootfs: /usr/bin/python3, its stdlib and shared libraries, pytest."""
    # Debian's interpreter (the one the CPU base carries), whatever python runs this test.
    real_python = Path(os.path.realpath(HOST_PYTHON))
    stdlib = Path(subprocess.run([HOST_PYTHON, "-c", "import os; print(os.path.dirname(os.__file__))"],
                                 capture_output=True, text=True, check=True).stdout.strip())
    (dest / "usr/bin").mkdir(parents=True)
    shutil.copy2(real_python, dest / "usr/bin" / real_python.name)
    os.symlink(real_python.name, dest / "usr/bin/python3")
    os.symlink("usr/bin", dest / "bin")
    shutil.copytree(stdlib, dest / stdlib.relative_to("/"), symlinks=True,
                    ignore=lambda d, names: [n for n in names if n in _STDLIB_SKIP or n == "site-packages"])
    dynload = list((stdlib / "lib-dynload").glob("*.so"))
    for lib in _needed_libs([real_python, *dynload]):
        target = dest / lib.relative_to("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(lib), target)
    site = dest / "usr/lib/python3/dist-packages"
    site.mkdir(parents=True)
    for name in _PY_PACKAGES:
        source = Path(__import__(name).__file__)
        if source.name == "__init__.py":
            shutil.copytree(source.parent, site / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, site / source.name)  # single-module distributions (py.py)
    (dest / "etc").mkdir()
    (dest / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\n")
    (dest / "etc/group").write_text("root:x:0:\n")
    for name in ("root", "tmp", "proc", "dev", "sys"):
        (dest / name).mkdir(exist_ok=True)
    return dest


def write_tree(dest: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return dest


def _layer(root: Path | None, extra: list[tarfile.TarInfo] = ()) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        if root is not None:
            for directory, dirs, names in os.walk(root):
                dirs.sort()
                for name in sorted(dirs + names):
                    path = Path(directory) / name
                    info = tar.gettarinfo(str(path), str(path.relative_to(root)))
                    info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
                    if info.isreg():
                        with path.open("rb") as handle:
                            tar.addfile(info, handle)
                    else:
                        tar.addfile(info)
        for info in extra:
            tar.addfile(info, io.BytesIO(b"") if info.isreg() else None)
    return buf.getvalue()


def whiteout(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = 0
    return info


def write_layout(layout: Path, layers: list[bytes], env: dict[str, str] | None = None,
                 labels: dict[str, str] | None = None) -> str:
    """Writes an OCI layout of uncompressed `layers` (tools/oci's writer); returns the manifest digest."""
    descs = []
    (layout / "blobs" / "sha256").mkdir(parents=True)
    for data in layers:
        desc = ocilayout.LayerDescriptor.uncompressed(ocilayout.sha256_digest(data), len(data), "host_image")
        ocilayout.blob_path(layout, desc.digest).write_bytes(data)
        descs.append(desc)
    changes = ocilayout.ConfigChanges(env={"PATH": "/usr/local/bin:/usr/bin:/bin", **(env or {})}, labels=labels or {})
    config = ocilayout.canonical_json(ocilayout.derive_config(None, descs, changes))
    manifest = ocilayout.canonical_json(ocilayout.make_manifest(config, None, descs))
    return ocilayout.write_layout(layout, manifest, config, "latest")


def layer_of(root: Path | None, extra: list[tarfile.TarInfo] = ()) -> bytes:
    return _layer(root, list(extra))
