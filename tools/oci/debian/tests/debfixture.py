"""Builds small .deb files and Packages indexes for the Debian tests (no dpkg needed)."""

from __future__ import annotations

import hashlib
import io
import lzma
import tarfile
from pathlib import Path

# path -> bytes (file), ("link", target) (symlink), ("hard", target) (hardlink), None (dir)
Files = dict[str, object]


def _tar(files: Files, compress: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path, content in files.items():
            info = tarfile.TarInfo("./" + path)
            if content is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif isinstance(content, tuple):
                info.type = tarfile.SYMTYPE if content[0] == "link" else tarfile.LNKTYPE
                info.linkname = content[1]
                tar.addfile(info)
            else:
                data = bytes(content)  # type: ignore[arg-type]
                info.size, info.mode = len(data), 0o755 if path.endswith(".sh") else 0o644
                tar.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    return lzma.compress(raw) if compress == "xz" else raw


def _ar(members: list[tuple[str, bytes]]) -> bytes:
    out = [b"!<arch>\n"]
    for name, data in members:
        out.append(f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(data):<10}`\n".encode())
        out.append(data + (b"\n" if len(data) % 2 else b""))
    return b"".join(out)


def control_text(name: str, version: str, depends: str = "") -> bytes:
    text = f"Package: {name}\nVersion: {version}\nArchitecture: amd64\nMaintainer: Test <t@example.org>\n"
    if depends:
        text += f"Depends: {depends}\n"
    return (text + f"Description: test package {name}\n").encode()


def build_deb(out: Path, name: str, version: str, files: Files, depends: str = "",
              data_member: str = "data.tar.xz") -> str:
    """Writes a format 2.0 .deb; returns its sha256."""
    control = _tar({"control": control_text(name, version, depends), "md5sums": b"0" * 32 + b"  x\n"}, "xz")
    data = _tar(files, "xz" if data_member.endswith(".xz") else "none")
    blob = _ar([("debian-binary", b"2.0\n"), ("control.tar.xz", control), (data_member, data)])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(blob)
    return hashlib.sha256(blob).hexdigest()


def packages_index(entries: list[tuple[str, str, str, str, str]]) -> bytes:
    """Packages.xz for (name, version, sha256, filename, depends) entries."""
    stanzas = []
    for name, version, sha, filename, depends in entries:
        s = f"Package: {name}\nVersion: {version}\nArchitecture: amd64\nFilename: {filename}\nSHA256: {sha}\n"
        stanzas.append(s + (f"Depends: {depends}\n" if depends else ""))
    return lzma.compress("\n".join(stanzas).encode())
