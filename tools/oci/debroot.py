"""The Debian runtime layer of a distroless-style base image, and its lock.

`build`: takes the .debs named by the lock (from the sha256 cache, else apt), extracts each
with `dpkg-deb -x` (no maintainer script runs), adds what those scripts would have made (CA
bundle, /etc/passwd, /etc/group, /etc/hosts, the ssl symlinks, empty /proc /dev /sys /tmp),
dpkg metadata for SBOM scanners under /var/lib/dpkg/status.d/, byte-compiles the standard
library (unchecked-hash .pyc), and writes the root as one deterministic tar layer.

When Debian's archive no longer has a locked version (security updates replace versions
within weeks) the soft mode resolves the current versions, prints one warning and goes on;
the strict mode (`--config=release`) fails. Either way the manifest JSON records every .deb
used (name, version, sha256) and what drifted.

`lock`: resolves the closure of the roots against an empty dpkg status (`apt-get install -s`)
on freshly updated indexes and writes the lock.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.oci import ocitar, pycompile  # noqa: E402
from tools.oci.debian import RELOCK, Apt, DebCache, DebianError, Lock, Pin, fetch  # noqa: E402
from tools.oci.ocilayout import LayerDescriptor, write_canonical  # noqa: E402

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


def default_cache() -> Path:
    return Path(os.path.expanduser("~")) / ".cache" / "glm53-engine"


def drift_report(locked: list[Pin], used: list[Pin]) -> list[dict[str, str]]:
    old = {p.name: p for p in locked}
    new = {p.name: p for p in used}
    out = []
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if a and b and a.version == b.version and (not a.sha256 or a.sha256 == b.sha256):
            continue
        out.append({"name": name, "locked": a.version if a else "", "used": b.version if b else ""})
    return out


def gather(lock: Lock, roots: list[str], exclude: list[str], mode: str, apt: Apt,
           cache: DebCache, lock_name: str) -> tuple[dict[Pin, Path], list[dict[str, str]]]:
    """The .debs to extract, and the drift from the lock (empty when the lock was used)."""
    if (tuple(roots), tuple(exclude)) != (lock.roots, lock.exclude):
        problem = f"{lock_name} was made for other roots/exclusions than the BUILD file names"
        missing = list(lock.pins)
        found: dict[Pin, Path] = {}
    else:
        problem = ""
        found, missing = fetch(apt, cache, list(lock.pins))
        if missing:
            apt = apt.private()
            more, missing = fetch(apt, cache, missing)
            found.update(more)
        if missing:
            problem = (f"{len(missing)} locked version(s) are no longer in Debian's archive: "
                       + ", ".join(f"{p.name}={p.version}" for p in missing))
    if not problem:
        return found, []
    if mode == "strict":
        raise DebianError(f"{lock_name} is stale ({problem}). Release builds need a current lock: "
                          f"run `{RELOCK}`, review and commit the lock, then rebuild.")
    if apt.lists_dir == Path("/var/lib/apt/lists"):
        apt = apt.private()
    resolved = [p for p in apt.resolve(roots) if p.name not in exclude]
    found, missing = fetch(apt, cache, resolved)
    if missing:
        raise DebianError("apt resolved versions it cannot download: "
                          + ", ".join(f"{p.name}={p.version}" for p in missing))
    drift = drift_report(list(lock.pins), sorted(found))
    moved = ", ".join(f"{d['name']} {d['locked'] or '(new)'} -> {d['used'] or '(gone)'}" for d in drift)
    print(f"WARNING: {lock_name} is stale ({problem}); building with the current versions instead: {moved}. "
          f"Every .deb used is recorded in the base manifest. Relock with `{RELOCK}` "
          "(release builds, --config=release, refuse a stale lock).", file=sys.stderr)
    return found, drift


def extract(debs: dict[Pin, Path], root: Path) -> None:
    status_d = root / "var/lib/dpkg/status.d"
    status_d.mkdir(parents=True, exist_ok=True)
    for pin in sorted(debs):
        deb = str(debs[pin])
        subprocess.run(["dpkg-deb", "-x", deb, str(root)], check=True)
        control = subprocess.run(["dpkg-deb", "-f", deb], check=True, capture_output=True).stdout
        (status_d / pin.name).write_bytes(control)
        md5 = subprocess.run(["dpkg-deb", "-I", deb, "md5sums"], capture_output=True)
        if md5.returncode == 0 and md5.stdout:
            (status_d / f"{pin.name}.md5sums").write_bytes(md5.stdout)


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
    lock_name = args.lock_name or str(args.lock)
    lock = Lock.parse(args.lock.read_text(), lock_name)
    cache_dir = args.cache_dir or default_cache()
    apt = Apt(cache_dir)
    debs, drift = gather(lock, args.root_pkg, args.exclude, args.mode, apt, DebCache(cache_dir), lock_name)
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
        "lock_current": not drift,
        "drift": drift,
        "roots": list(args.root_pkg),
        "exclude": list(args.exclude),
        "packages": [{"name": p.name, "version": p.version, "sha256": p.sha256} for p in sorted(debs)],
        "ca_certificates": ncerts,
        "layer": desc.to_json(),
    }
    write_canonical(args.out_manifest, manifest)


def relock(args: argparse.Namespace) -> None:
    cache_dir = args.cache_dir or default_cache()
    apt = Apt(cache_dir).private()
    resolved = [p for p in apt.resolve(args.root_pkg) if p.name not in args.exclude]
    index = apt.candidates([p.name for p in resolved])
    pins = []
    for p in resolved:
        c = index.get((p.name, p.version))
        if c is None:
            raise DebianError(f"apt resolved {p.name}={p.version} but apt-cache show has no such version")
        pins.append(Pin(p.name, p.version, c.sha256))
    out = args.out
    if not out.is_absolute() and os.environ.get("BUILD_WORKSPACE_DIRECTORY"):
        out = Path(os.environ["BUILD_WORKSPACE_DIRECTORY"]) / out
    old = Lock.parse(out.read_text(), str(out)) if out.exists() else None
    new = Lock(tuple(args.root_pkg), tuple(args.exclude), tuple(sorted(pins)))
    out.write_text(new.render())
    changes = drift_report(list(old.pins), list(new.pins)) if old else []
    summary = f", {len(changes)} changed" + (":" if changes else "") if old else ""
    print(f"wrote {out}: {len(pins)} packages{summary}")
    for d in changes:
        print(f"  {d['name']}: {d['locked'] or '(new)'} -> {d['used'] or '(removed)'}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("build", "lock"):
        s = sub.add_parser(name)
        s.add_argument("--root-pkg", action="append", required=True, help="a root package of the closure")
        s.add_argument("--exclude", action="append", default=[],
                       help="a package of the closure not to install (needed only by maintainer scripts)")
        s.add_argument("--cache-dir", type=Path, help="default ~/.cache/glm53-engine (debs by sha256, apt lists)")
    b = sub.choices["build"]
    b.add_argument("--lock", type=Path, required=True)
    b.add_argument("--lock-name", help="the lock's workspace path, for messages")
    b.add_argument("--mode", choices=("soft", "strict"), default="soft")
    b.add_argument("--out", type=Path, required=True, help="layer tar")
    b.add_argument("--out-descriptor", type=Path, required=True)
    b.add_argument("--out-manifest", type=Path, required=True, help="JSON: every .deb used, drift")
    sub.choices["lock"].add_argument("--out", type=Path, required=True, help="lock file (relative: to the workspace)")
    args = p.parse_args(argv)
    try:
        build(args) if args.command == "build" else relock(args)
    except (DebianError, ocitar.LayerError, pycompile.CompileError, subprocess.CalledProcessError, OSError) as e:
        print(f"debroot.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
