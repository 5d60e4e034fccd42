"""The Python-packages layer of a base image: hash-locked wheels installed into dist-packages.

The image has no pip, so the host's CPython 3.11 (/usr/bin/python3, the same interpreter line
as the image's) installs the wheels with `pip --target` into the image path
/usr/lib/python3/dist-packages, offline and hash-checked:

    pip --isolated install --no-index --no-deps --require-hashes --only-binary=:all:
        --no-compile --find-links <wheel dir> --target <root>/usr/lib/python3/dist-packages -r <lock>

Then console scripts move to /usr/local/bin, directories named by --prune are deleted (triton's
CUDA/AMD binaries: ~470 MB that CPU imports never load) and everything is byte-compiled
(unchecked-hash). Output: the layer tar, its descriptor and a manifest of the wheels used.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.oci import ocitar, pycompile  # noqa: E402
from tools.oci.ocilayout import LayerDescriptor, write_canonical  # noqa: E402

SITE = "usr/lib/python3/dist-packages"
BIN = "usr/local/bin"


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
        out.append({"name": name, "version": version, "sha256": hashes[0] if hashes else ""})
    return out


def install(lock: Path, wheel_dir: Path, root: Path, python: str) -> None:
    site = root / SITE
    site.mkdir(parents=True, exist_ok=True)
    cmd = [
        python, "-m", "pip", "--isolated", "--disable-pip-version-check", "--no-input",
        "install", "--no-index", "--no-deps", "--require-hashes", "--only-binary=:all:",
        "--no-compile", "--no-warn-script-location", "--no-cache-dir",
        "--find-links", str(wheel_dir), "--target", str(site), "-r", str(lock),
    ]
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "HOME": str(root.parent), "PYTHONHASHSEED": "0",
           "TMPDIR": str(root.parent)}
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if proc.returncode != 0:
        raise WheelError(f"pip install --target failed (rc {proc.returncode}):\n{proc.stdout[-4000:]}\n"
                         "The wheels are the locked ones from @sglang_cpu; if a hash mismatches, refetch "
                         "(`./tools/bazel sync --only=sglang_cpu`) or relock.")


def relocate_scripts(root: Path) -> list[str]:
    """pip --target puts console scripts in <target>/bin; the image has them in /usr/local/bin."""
    src = root / SITE / "bin"
    if not src.is_dir():
        return []
    dst = root / BIN
    dst.mkdir(parents=True, exist_ok=True)
    moved = []
    for script in sorted(src.iterdir()):
        shutil.move(str(script), dst / script.name)
        moved.append(script.name)
    src.rmdir()
    return moved


def prune(root: Path, paths: list[str]) -> list[str]:
    removed = []
    for rel in paths:
        target = root / SITE / rel
        if target.is_dir():
            shutil.rmtree(target)
            removed.append(rel)
        elif target.exists():
            target.unlink()
            removed.append(rel)
    return removed


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lock", type=Path, required=True, help="pip --require-hashes lock")
    p.add_argument("--wheel", type=Path, action="append", default=[], help="a locked wheel file (repeat)")
    p.add_argument("--prune", action="append", default=[], help="path under dist-packages to delete")
    p.add_argument("--python", default=sys.executable, help="CPython 3.11 that runs pip and compileall")
    p.add_argument("--created-by", default="python wheels")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--out-descriptor", type=Path, required=True)
    p.add_argument("--out-manifest", type=Path, required=True)
    args = p.parse_args(argv)
    try:
        wheels = parse_lock(args.lock.read_text(), str(args.lock))
        with tempfile.TemporaryDirectory(prefix="pyroot-") as tmp:
            wheel_dir = Path(tmp) / "wheels"
            wheel_dir.mkdir()
            for w in args.wheel:
                os.symlink(os.path.realpath(w), wheel_dir / w.name)
            root = Path(tmp) / "root"
            install(args.lock, wheel_dir, root, args.python)
            scripts = relocate_scripts(root)
            pruned = prune(root, args.prune)
            missing = [p for p in args.prune if p not in pruned]
            if missing:
                raise WheelError(f"--prune paths not found under {SITE}: {missing}; fix the BUILD file's prune list")
            pycompile.compile_tree(root, [SITE], workers=0, python=args.python)
            entries = list(ocitar.walk_tree(root))
            digest = ocitar.write_layer(entries, args.out)
        desc = LayerDescriptor.uncompressed(digest.digest, digest.size, args.created_by)
        desc.write(args.out_descriptor)
        manifest: dict[str, Any] = {
            "kind": "python-wheels",
            "site": "/" + SITE,
            "wheels": wheels,
            "scripts": scripts,
            "pruned": pruned,
            "layer": desc.to_json(),
        }
        write_canonical(args.out_manifest, manifest)
    except (WheelError, ocitar.LayerError, pycompile.CompileError, OSError) as e:
        print(f"pyroot.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
