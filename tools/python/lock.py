"""Regenerates a hash-locked lock file from its .in file.

    ./tools/bazel run //tools/python:lock -- tools [sglang_cpu ...]

pip resolves `<name>.in` (with its dependencies) and `<name>.nodeps.in` (without them) for this
machine's interpreter and platform, using the machine's pip configuration (index mirrors,
find-links such as the local CPU torch wheel). The lock keeps exactly one wheel per package:
its sha256 (so `pip --require-hashes` accepts it) and its URL (so Bazel's downloader, and with
it `--repository_cache`, can fetch it offline). Lines of `<name>.in` that start with
`# lock-header:` are copied into the lock's header (e.g. why a pin departs from upstream's).

A wheel pip finds only in a local find-links directory (the CPU torch build) gets its public
URL from a `# lock-index: <name> <index URL>` line of the .in file: the lock lists
`<index URL><file name>` first and the local file as a `# mirror:`, with the same sha256, so
Bazel's downloader tries the public index, then the mirror.

When the lock already exists its `name==version` pins are passed to pip as constraints
(`-c`), as pip-compile and uv keep existing pins: a relock moves only new or changed
requirements (and whatever they newly pull in), never the versions of the rest.

    ./tools/bazel run //tools/python:lock -- sglang_cpu --upgrade-package numpy   # repeatable
    ./tools/bazel run //tools/python:lock -- sglang_cpu --upgrade                 # re-resolve all

A line of the .in files that excludes its locked version (e.g. `transformers==5.13.0` over a
lock holding 5.12.1) is an error naming the package; `--upgrade-package NAME` lets it move.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement


HEADER_NOTE = "# lock-header:"
INDEX_NOTE = "# lock-index:"


class LockError(Exception):
    pass


def header_notes(source: Path) -> str:
    """The `# lock-header:` lines of an .in file, as lock header comment lines."""
    notes = [line[len(HEADER_NOTE):].strip() for line in source.read_text().splitlines() if line.startswith(HEADER_NOTE)]
    return "".join(f"# {note}\n" for note in notes)


def public_indexes(source: Path) -> dict[str, str]:
    """name -> index URL of the `# lock-index: <name> <index URL>` lines of an .in file."""
    indexes = {}
    for lineno, line in enumerate(source.read_text().splitlines(), start=1):
        if not line.startswith(INDEX_NOTE):
            continue
        parts = line[len(INDEX_NOTE):].split()
        if len(parts) != 2 or not parts[1].startswith("https://") or not parts[1].endswith("/"):
            raise LockError(f"{source}:{lineno}: expected `{INDEX_NOTE} <name> https://<index>/`, got {line!r}")
        indexes[parts[0].lower().replace("_", "-")] = parts[1]
    return indexes


@dataclass(frozen=True)
class LockedWheel:
    name: str
    version: str
    sha256: str
    url: str
    mirrors: tuple[str, ...] = ()

    def render(self) -> str:
        mirrors = "".join(f"# mirror: {m}\n" for m in self.mirrors)
        return f"{mirrors}# url: {self.url}\n{self.name}=={self.version} --hash=sha256:{self.sha256}\n"

    def published(self, indexes: dict[str, str]) -> "LockedWheel":
        """The public index URL first when the wheel was resolved from a local file."""
        index = indexes.get(self.name)
        if index is None or not self.url.startswith("file:"):
            return self
        return LockedWheel(self.name, self.version, self.sha256, index + self.url.rsplit("/", 1)[1], (self.url,))


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def locked_pins(lock_file: Path) -> dict[str, str]:
    """normalised name -> version of the `name==version --hash=...` lines of an existing lock."""
    if not lock_file.is_file():
        return {}
    pins = {}
    for line in lock_file.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.split()[0].partition("==")
            pins[_norm(name)] = version
    return pins


def constraints(lock_file: Path, sources: list[Path], upgrade: bool, upgrade_packages: set[str]) -> str:
    """The lock's pins as a pip constraints file, minus the packages allowed to move.

    A requirement of `sources` that its locked version does not satisfy is a LockError: pip
    would only say ResolutionImpossible.
    """
    if upgrade:
        return ""
    locked = locked_pins(lock_file)
    for unknown in sorted(upgrade_packages - locked.keys()):
        print(f"lock: warning: --upgrade-package {unknown}: not in {lock_file.name}", file=sys.stderr)
    pins = {name: v for name, v in locked.items() if name not in upgrade_packages}
    for source in sources:
        for line in source.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if not line or line.startswith("-"):
                continue
            req = Requirement(line)
            version = pins.get(_norm(req.name))
            if version is not None and not req.specifier.contains(version, prereleases=True):
                raise LockError(
                    f"{lock_file.name} pins {req.name}=={version}, which `{line}` in {source.name} excludes; "
                    f"let it move with `./tools/bazel run //tools/python:lock -- {lock_file.stem} "
                    f"--upgrade-package {_norm(req.name)}`"
                )
    return "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))


def _sha256_of_url(url: str) -> str:
    digest = hashlib.sha256()
    with urllib.request.urlopen(url) as response:  # file:// or https://
        for chunk in iter(lambda: response.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def machine_find_links(python: str) -> list[str]:
    """The find-links of the machine's pip configuration (where the CPU torch wheel lies)."""
    proc = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True)
    links: list[str] = []
    for line in proc.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.endswith(".find-links"):
            links += value.strip("'\"").split()
    return links


def resolve(python: str, requirements: Path, with_deps: bool, constraint: Path | None = None) -> list[LockedWheel]:
    """Asks pip which wheels it would install, without installing anything.

    `--isolated` keeps machine-local index mirrors out of the lock, so its URLs point at PyPI;
    the machine's find-links are passed back explicitly for wheels PyPI does not have.
    `constraint`: a pip constraints file (the existing lock's pins).
    """
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [
            python, "-m", "pip", "--isolated", "install", "--dry-run", "--ignore-installed",
            "--only-binary=:all:", "--disable-pip-version-check", "--no-input",
            "--report", str(report), "-r", str(requirements),
        ]
        for link in machine_find_links(python):
            cmd += ["--find-links", link]
        if constraint is not None:
            cmd += ["-c", str(constraint)]
        if not with_deps:
            cmd.insert(5, "--no-deps")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            hint = (
                f"\n(constrained to the existing lock's pins: let a locked package move with "
                f"`--upgrade-package NAME`, or re-resolve everything with `--upgrade`)" if constraint else ""
            )
            raise LockError(f"pip could not resolve {requirements}:\n{proc.stderr[-3000:]}{hint}")
        data = json.loads(report.read_text())
    wheels = []
    for item in data["install"]:
        info = item["download_info"]
        url = info["url"]
        if not url.endswith(".whl"):
            raise LockError(f"{requirements}: {item['metadata']['name']} resolved to a non-wheel {url}")
        hashes = info.get("archive_info", {}).get("hashes", {})
        sha = hashes.get("sha256") or _sha256_of_url(url)
        name = item["metadata"]["name"].lower().replace("_", "-")
        wheels.append(LockedWheel(name, item["metadata"]["version"], sha, url))
    return wheels


def lock(python: str, directory: Path, name: str, upgrade: bool = False, upgrade_packages: frozenset[str] = frozenset()) -> Path:
    source = directory / f"{name}.in"
    if not source.is_file():
        raise LockError(f"{source} does not exist; locks are named after their .in files in {directory}")
    nodeps = directory / f"{name}.nodeps.in"
    out = directory / f"{name}.lock"
    sources = [source] + ([nodeps] if nodeps.is_file() else [])
    pins = constraints(out, sources, upgrade, {_norm(p) for p in upgrade_packages})
    with tempfile.TemporaryDirectory() as tmp:
        constraint = Path(tmp) / "constraints.txt" if pins else None
        if constraint:
            constraint.write_text(pins)
        wheels = {w.name: w for w in resolve(python, source, with_deps=True, constraint=constraint)}
        if nodeps.is_file():
            for wheel in resolve(python, nodeps, with_deps=False, constraint=constraint):
                wheels[wheel.name] = wheel
    indexes = public_indexes(source)
    wheels = {key: wheel.published(indexes) for key, wheel in wheels.items()}
    local = [w.name for w in wheels.values() if w.url.startswith("file:")]
    if local:
        raise LockError(f"{source}: {local} resolved only to local files; add `{INDEX_NOTE} <name> <public index URL>`")
    header = (
        f"# Generated by `./tools/bazel run //tools/python:lock -- {name}` from {name}.in"
        + (f" and {name}.nodeps.in" if nodeps.is_file() else "")
        + "; do not edit.\n# One wheel per package for CPython 3.11 on linux x86_64: url (after any"
        " mirrors), then a pip --require-hashes line.\n"
        + header_notes(source)
    )
    body = "".join(wheels[key].render() for key in sorted(wheels))
    tmp = out.with_suffix(".lock.tmp")
    tmp.write_text(header + body)
    os.replace(tmp, out)  # never leave a half-written lock
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("locks", nargs="+", help="lock names, e.g. tools sglang_cpu")
    parser.add_argument("--python", default="/usr/bin/python3", help="interpreter whose pip resolves (default: %(default)s)")
    parser.add_argument("--dir", type=Path, help="directory of the .in files (default: third_party/python in the workspace)")
    parser.add_argument("--upgrade", action="store_true", help="ignore the existing lock's pins")
    parser.add_argument("--upgrade-package", action="append", default=[], metavar="NAME", help="let NAME move from its pin (repeatable)")
    args = parser.parse_args(argv)
    workspace = Path(os.environ.get("BUILD_WORKSPACE_DIRECTORY", "."))
    directory = args.dir or workspace / "third_party" / "python"
    try:
        for name in args.locks:
            print(f"locked {lock(args.python, directory, name, args.upgrade, frozenset(args.upgrade_package))}")
    except LockError as err:
        print(f"lock: ERROR: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
