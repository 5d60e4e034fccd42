"""One rollout per Compose project per host: an flock on /run/lock/glm53-rollout.<project>.lock.

The lock is taken before anything is planned and held until the command exits (apply, resume,
rollback alike); the kernel releases it when the process dies, so a held lock always means a
live process and there is no stale lock to clean up. The holder writes who it is into the
file (pid, command, journal, start time), which is what a refused second rollout prints.
/run/lock is the host's (not the user's) lock directory, so two operators' shells, or two
checkouts, contend for the same file.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

DEFAULT_DIR = Path("/run/lock")
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


class LockHeld(Exception):
    pass


@dataclass
class ProjectLock:
    directory: Path
    project: str
    _handle: IO[str] | None = None

    @property
    def path(self) -> Path:
        return self.directory / f"glm53-rollout.{_SAFE.sub('_', self.project)}.lock"

    def acquire(self, command: str, journal: Path) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()
            handle.close()
            try:
                who = json.loads(holder)
                described = (f"pid {who['pid']} (`{who['command']}`, journal {who['journal']}, since {who['started']})")
            except (ValueError, KeyError, TypeError):
                described = "a process that has not written its name yet"
            raise LockHeld(f"another rollout of project {self.project} holds {self.path}: {described}; wait for it to "
                           f"finish, or continue/undo its journal once it has exited (docs/rollout.md, \"The lock\")") from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "command": command, "journal": str(journal),
                                 "started": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}) + "\n")
        handle.flush()
        self._handle = handle

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()  # closing the descriptor drops the flock
            self._handle = None
