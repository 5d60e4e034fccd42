"""The Debian runtime layer of a distroless-style base image, and its lock.

`build` (a sandboxed action, no network): takes the resolved lock and the .debs the
repository rule downloaded (tools/oci/debian/private/debian_repository.bzl), checks each against its
sha256, unpacks each in pure Python (no dpkg, no maintainer script runs), adds what those
scripts would have made (CA bundle, /etc/passwd, /etc/group, /etc/hosts, the ssl symlinks,
empty /proc /dev /sys /tmp), dpkg metadata for SBOM scanners under /var/lib/dpkg/status.d/,
byte-compiles the standard library (unchecked-hash .pyc), and writes the root as one
deterministic tar layer. The manifest JSON records every .deb used and the drift the
repository rule resolved; the strict mode (`--config=release`) refuses drift.

`lock` (`bazel run`, needs the network): resolves the closure of the roots with apt against an
empty dpkg status and the given archives' freshly downloaded, signature-checked indexes, and
writes the lock (sha256 and pool path of each .deb from the Packages index).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from tools.oci import ocitar
from tools.oci.debian.debian import (Apt, Archive, Deb, DebianError, Lock, Pin, pins_from_indexes,
                                     relock_command, unpack)
from tools.oci.ocilayout import LayerDescriptor, write_canonical
from tools.oci.python import pycompile

PASSWD = "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
GROUP = "root:x:0:\nnogroup:x:65534:\n"
HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"
OS_RELEASE = (
    'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nNAME="Debian GNU/Linux"\nVERSION_ID="12"\n'
    'VERSION="12 (bookworm)"\nVERSION_CODENAME=bookworm\nID=debian\nHOME_URL="https://www.debian.org/"\n'
)
EMPTY_DIRS = {"proc": 0o755, "dev": 0o755, "sys": 0o755, "tmp": 0o1777, "var/tmp": 0o1777, "root": 0o700,
              "usr/local/lib/python3.11/dist-packages": 0o755, "etc/ssl/certs": 0o755}
SYMLINKS = {"usr/lib/ssl/cert.pem": "/etc/ssl/certs/ca-certificates.crt", "usr/lib/ssl/certs": "/etc/ssl/certs"}
CA_BUNDLE = "etc/ssl/certs/ca-certificates.crt"


def check_lock(lock: Lock, roots: list[str], exclude: list[str], mode: str, lock_name: str) -> None:
    """Refuses a lock made for other roots, and (strict mode) one the repository rule drifted."""
    if (tuple(roots), tuple(exclude)) != (lock.roots, lock.exclude):
        raise DebianError(f"{lock_name} was made for other roots/exclusions than the BUILD file names; "
                          f"run `{lock.relock}`, review and commit the lock")
    if lock.drift and mode == "strict":
        moved = ", ".join(f"{d.name}={d.locked} (archive now has {d.used})" for d in lock.drift)
        raise DebianError(f"{lock_name} is stale: {len(lock.drift)} locked version(s) are on no mirror: {moved}. "
                          f"Release builds need a current lock: run `{lock.relock}`, review and commit the lock, "
                          "then rebuild.")


def find_debs(lock: Lock, deb_files: list[Path]) -> dict[Pin, Path]:
    """The given .deb file of every pin, checked against the pin's sha256."""
    by_name = {f.name: f for f in deb_files}
    out = {}
    for pin in lock.pins:
        path = by_name.get(pin.filename)
        if path is None:
            raise DebianError(f"no {pin.filename} ({pin.name} {pin.version}) among the inputs; the lock's repository rule "
                              "downloads it: pass its `debs` target")
        digest = ocitar.hash_file(path).sha256
        if digest != pin.sha256:
            raise DebianError(f"{path}: sha256 {digest}, the lock says {pin.sha256}")
        out[pin] = path
    return out


def extract(debs: dict[Pin, Path], root: Path) -> None:
    status_d = root / "var/lib/dpkg/status.d"
    status_d.mkdir(parents=True, exist_ok=True)
    for pin in sorted(debs, key=lambda p: (p.name, p.version, p.sha256)):
        deb = Deb.open(debs[pin])
        unpack(deb, root)
        (status_d / pin.name).write_bytes(deb.control)
        if deb.md5sums:
            (status_d / f"{pin.name}.md5sums").write_bytes(deb.md5sums)


def ca_bundle(root: Path) -> int:
    """Concatenates the shipped certificates like update-ca-certificates (LC_ALL=C order)."""
    share = root / "usr/share/ca-certificates"
    certs = sorted((p for p in share.rglob("*.crt")), key=lambda p: p.relative_to(share).as_posix().encode())
    if not certs:
        raise DebianError("no certificates under /usr/share/ca-certificates: is ca-certificates among the roots?")
    bundle = root / CA_BUNDLE
    bundle.parent.mkdir(parents=True, exist_ok=True)
    with open(bundle, "wb") as out:
        for cert in certs:
            data = cert.read_bytes()
            out.write(data if data.endswith(b"\n") else data + b"\n")
    return len(certs)


def add_generated(root: Path) -> dict[str, int]:
    """Files maintainer scripts would have made; returns explicit modes by path."""
    for rel, text in (("etc/passwd", PASSWD), ("etc/group", GROUP), ("etc/hosts", HOSTS), ("etc/os-release", OS_RELEASE)):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    for rel in EMPTY_DIRS:
        (root / rel).mkdir(parents=True, exist_ok=True)
    for rel, target in SYMLINKS.items():
        link = root / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)
    return dict(EMPTY_DIRS)


def build(args: argparse.Namespace) -> None:
    lock = Lock.parse(args.lock.read_text(), str(args.lock))
    lock_name = lock.source or str(args.lock)
    check_lock(lock, args.root_pkg, args.exclude, args.mode, lock_name)
    debs = find_debs(lock, args.deb)
    with tempfile.TemporaryDirectory(prefix="debroot-") as tmp:
        root = Path(tmp)
        extract(debs, root)
        python = root / "usr/bin/python3.11"
        if not python.exists():
            raise DebianError("the closure has no /usr/bin/python3.11: keep python3.11-minimal among the roots")
        ncerts = ca_bundle(root)
        modes = add_generated(root)
        pycompile.compile_tree(root, ["usr/lib/python3.11"], workers=0)
        entries = list(ocitar.walk_tree(root, modes=modes))
        digest = ocitar.write_layer(entries, args.out)
    created_by = f"debian runtime: {len(debs)} .debs extracted without maintainer scripts ({lock_name})"
    desc = LayerDescriptor.uncompressed(digest.digest, digest.size, created_by)
    desc.write(args.out_descriptor)
    manifest: dict[str, Any] = {
        "kind": "debian-rootfs",
        "lock": lock_name,
        "lock_mode": args.mode,
        "lock_current": not lock.drift,
        "drift": [d.to_json() for d in lock.drift],
        "roots": list(args.root_pkg),
        "exclude": list(args.exclude),
        "packages": [{"name": p.name, "version": p.version, "sha256": p.sha256} for p in sorted(debs)],
        "ca_certificates": ncerts,
        "layer": desc.to_json(),
    }
    write_canonical(args.out_manifest, manifest)


def relock(args: argparse.Namespace) -> None:
    archives = tuple(Archive.parse(a, "--archive") for a in args.archive)
    with tempfile.TemporaryDirectory(prefix="debian-lock-") as tmp:
        apt = Apt(Path(tmp), archives)
        apt.update()
        resolved = [nv for nv in apt.resolve(args.root_pkg) if nv[0] not in args.exclude]
        pins = pins_from_indexes(resolved, apt.indexes())
    out = args.out
    if not out.is_absolute() and os.environ.get("BUILD_WORKSPACE_DIRECTORY"):
        out = Path(os.environ["BUILD_WORKSPACE_DIRECTORY"]) / out
    old = Lock.parse(out.read_text(), str(out)) if out.exists() else None
    new = Lock(tuple(args.root_pkg), tuple(args.exclude), archives, tuple(pins), relock=relock_command(args.target))
    out.write_text(new.render())
    before = {p.name: p.version for p in old.pins} if old else {}
    after = {p.name: p.version for p in new.pins}
    changes = sorted(n for n in set(before) | set(after) if before.get(n) != after.get(n))
    summary = f", {len(changes)} changed" + (":" if changes else "") if old else ""
    print(f"wrote {out}: {len(pins)} packages{summary}")
    for n in changes:
        print(f"  {n}: {before.get(n, '(new)')} -> {after.get(n, '(removed)')}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("build", "lock"):
        s = sub.add_parser(name)
        s.add_argument("--root-pkg", action="append", required=True, help="a root package of the closure")
        s.add_argument("--exclude", action="append", default=[],
                       help="a package of the closure not to install (needed only by maintainer scripts)")
    b = sub.choices["build"]
    b.add_argument("--lock", type=Path, required=True, help="the resolved lock (from the repository rule)")
    b.add_argument("--deb", type=Path, action="append", default=[], help="a downloaded .deb of the lock")
    b.add_argument("--mode", choices=("soft", "strict"), default="soft")
    b.add_argument("--out", type=Path, required=True, help="layer tar")
    b.add_argument("--out-descriptor", type=Path, required=True)
    b.add_argument("--out-manifest", type=Path, required=True, help="JSON: every .deb used, drift")
    lk = sub.choices["lock"]
    lk.add_argument("--out", type=Path, required=True, help="lock file (relative: to the workspace)")
    lk.add_argument("--target", required=True, help="this lock tool's label, named in the lock's header")
    lk.add_argument("--archive", action="append", required=True,
                    help="`NAME SUITE[,SUITE...] MIRROR...`: an archive the lock takes packages from")
    args = p.parse_args(argv)
    try:
        build(args) if args.command == "build" else relock(args)
    except (DebianError, ocitar.LayerError, pycompile.CompileError, OSError) as e:
        print(f"debroot.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
