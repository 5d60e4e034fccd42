"""The Python packages a series ships beside its patches (series.json `packages`).

A series' hooks in SGLang call a package kept in the repository (engine/<name>/); the chain
writes its files next to sglang/ in the patched output, and PROVENANCE and the resolved
declaration carry each file's sha256 and one digest per package, so the package is as much a
part of the series' identity as its patches.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from .declaration import Chain
from .errors import DeclarationError, Where

_FIX = "list the package in series.json `packages` and in the patch_series `packages` attribute (BUILD.bazel)"


@dataclass(frozen=True)
class Packages:
    files: dict[str, bytes]  # package-relative output path (<name>/...) -> bytes
    digests: dict[str, str]  # package name -> package_digest

    def file_hashes(self, name: str) -> dict[str, str]:
        return {
            path: hashlib.sha256(data).hexdigest()
            for path, data in sorted(self.files.items())
            if path.split("/", 1)[0] == name
        }


def package_digest(file_hashes: dict[str, str]) -> str:
    """sha256 over `<path> <sha256>` lines, sorted by path: changes with any file, name or set."""
    text = "".join(f"{path} {digest}\n" for path, digest in sorted(file_hashes.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def read_packages(chain: Chain, pairs: list[str]) -> Packages:
    """`pairs`: `<name>/<path>=<file on disk>`, one per file of every package the chain ships."""
    files: dict[str, bytes] = {}
    for pair in pairs:
        dst, sep, src = pair.partition("=")
        name = dst.split("/", 1)[0]
        if not sep or "/" not in dst or dst.startswith("sglang/") or ".." in dst.split("/"):
            raise DeclarationError(f"--package-file {pair!r}: expected <package>/<path>=<file>", Where(fix=_FIX))
        if name not in chain.packages:
            raise DeclarationError(
                f"package {name} was given to the action but series {chain.name} does not ship it "
                f"(its chain ships: {', '.join(chain.packages) or 'none'})",
                Where(fix=_FIX),
            )
        files[dst] = Path(src).read_bytes()
    digests = {}
    for name in chain.packages:
        hashes = {p: hashlib.sha256(files[p]).hexdigest() for p in files if p.split("/", 1)[0] == name}
        if f"{name}/__init__.py" not in hashes:
            raise DeclarationError(
                f"series {chain.name} ships package {name}, but the action got no {name}/__init__.py",
                Where(fix=_FIX),
            )
        digests[name] = package_digest(hashes)
    return Packages(files, digests)
