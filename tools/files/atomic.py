"""Replace a file in one rename, so a reader sees the old bytes or the new ones, never a mix.

The temporary file lives in the target's directory (a rename across file systems is a copy),
is flushed to disk before the rename, gets mode 0644 (mkstemp's 0600 would hide a committed
file from other users), and is removed when anything fails.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_text(path: Path, text: str) -> None:
    """Writes `text` (UTF-8, `\\n` line ends) to `path` atomically; creates the directory."""
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: Path, data: bytes) -> None:
    """Writes `data` to `path` atomically; creates the directory."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
