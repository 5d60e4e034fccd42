"""The rollout journal: what an apply has done so far, written after every step.

An interrupted rollout (the operator's Ctrl-C, a lost SSH session, a host reboot) leaves the
journal in state `applying` or `rolling-back`; `rollout apply --resume` continues it and
`rollout rollback` returns every service it touched to the deployed revision. The journal keeps
its own copies of both revisions, so neither needs git or the work tree afterwards. It holds
no environment value: only the env file's path.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

APPLYING, ROLLING_BACK, DONE, ROLLED_BACK, ROLLBACK_FAILED = "applying", "rolling-back", "done", "rolled-back", "rollback-failed"
FAILED = "failed"  # refused after the journal was written (a pull, a drain) with nothing stopped
UNFINISHED = (APPLYING, ROLLING_BACK, ROLLBACK_FAILED)
# Per service, in order. `stopping` is written before the old container is touched.
PENDING, STOPPING, STARTED, HEALTHY, VERIFIED, ROLLED = "pending", "stopping", "started", "healthy", "verified", "rolled"
SERVICE_ROLLED_BACK = "rolled-back"


class JournalError(Exception):
    pass


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class ServiceEntry:
    step: str = PENDING
    old_container: str | None = None
    new_container: str | None = None
    drained: bool = False  # out of the proxy's rotation: a rollback or resume puts it back


@dataclass
class Journal:
    path: Path
    project: str
    services: list[str]
    from_label: str
    to_label: str
    from_file: str  # the journal's own copy of each revision
    to_file: str
    env_file: str | None
    project_dir: str
    state: str = APPLYING
    entries: dict[str, ServiceEntry] = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)
    error: str | None = None
    # The gates this apply runs with (no secret: the token is named by its env-file key), so a
    # resume or rollback checks exactly what the apply did.
    options: dict = field(default_factory=dict)
    # The host's compose manager does not reconcile the services (manager.py) until resumed.
    manager_paused: bool = False

    @classmethod
    def create(cls, path: Path, project: str, services: list[str], from_label: str, from_text: str,
               to_label: str, to_text: str, env_file: Path | None, project_dir: Path,
               options: dict | None = None) -> "Journal":
        if path.exists():
            old = cls.load(path)
            if old.state in UNFINISHED:
                raise JournalError(
                    f"{path}: an unfinished rollout ({old.state}: {', '.join(old.services)}, {old.from_label} -> "
                    f"{old.to_label}) is recorded here; continue it with `rollout apply --resume --journal {path}` "
                    f"or undo it with `rollout rollback --journal {path}`")
        revisions = path.with_name(path.name + ".d")
        revisions.mkdir(parents=True, exist_ok=True)
        (revisions / "from.yaml").write_text(from_text)
        (revisions / "to.yaml").write_text(to_text)
        journal = cls(path=path, project=project, services=list(services), from_label=from_label, to_label=to_label,
                      from_file=str(revisions / "from.yaml"), to_file=str(revisions / "to.yaml"),
                      env_file=str(env_file) if env_file else None, project_dir=str(project_dir),
                      entries={s: ServiceEntry() for s in services}, options=dict(options or {}))
        journal.record(None, "created", f"{from_label} -> {to_label}")
        return journal

    @classmethod
    def load(cls, path: Path) -> "Journal":
        try:
            raw = json.loads(path.read_text())
            raw["entries"] = {k: ServiceEntry(**v) for k, v in raw["entries"].items()}
            return cls(path=path, **{k: v for k, v in raw.items() if k != "path"})
        except FileNotFoundError:
            raise JournalError(f"{path}: no rollout journal here (apply writes one with --journal)") from None
        except (ValueError, KeyError, TypeError) as err:
            raise JournalError(f"{path}: not a rollout journal ({err}); inspect it by hand") from None

    def save(self) -> None:
        data = asdict(self)
        data.pop("path")
        tmp = self.path.with_name(self.path.name + f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(data, indent=1) + "\n")
        tmp.replace(self.path)

    def record(self, service: str | None, step: str, detail: str = "", **entry: str | bool | None) -> None:
        if service is not None:
            current = self.entries[service]
            current.step = step
            for key, value in entry.items():
                setattr(current, key, value)
        self.events.append({"at": _now(), "service": service, "step": step, "detail": detail})
        self.save()

    def set_state(self, state: str, error: str | None = None) -> None:
        self.state = state
        if error is not None:
            self.error = error
        self.record(None, state, error or "")

    def touched(self) -> list[str]:
        """Services whose old container may already be gone, in the order they were rolled."""
        return [s for s in self.services if self.entries[s].step not in (PENDING, SERVICE_ROLLED_BACK)]
