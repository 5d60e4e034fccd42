"""The reviewed file of accepted prompt differences: `patches/prompt_parity/<candidate>.accepted.json`.

    {
      "schema": 1,
      "current": "0.5.19",
      "candidate": "0.5.23",
      "accepted": [
        {"entry": "tool/single", "candidate_ids_sha256": "<64 hex>", "reason": "what changed and why it is fine"}
      ]
    }

An acceptance binds a corpus entry to the exact candidate ids a reviewer looked at (their
sha256, `compare.ids_sha256`): if the ids change again the hash stops matching and the gate fails.
Unknown keys, wrong types, a malformed hash, an empty reason and a repeated entry are errors that
name the file, the entry and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.files import typed

SCHEMA = 1
_TOP_KEYS = ("schema", "current", "candidate", "accepted")
_ENTRY_KEYS = ("entry", "candidate_ids_sha256", "reason")


class AcceptedFileError(ValueError):
    """The accepted file is malformed; the message names the file, the entry and the fix."""


@dataclass(frozen=True)
class Acceptance:
    entry: str
    candidate_ids_sha256: str
    reason: str


@dataclass(frozen=True)
class AcceptedFile:
    path: str
    current: str
    candidate: str
    accepted: tuple[Acceptance, ...]

    def by_entry(self) -> dict[str, Acceptance]:
        return {a.entry: a for a in self.accepted}


def _error(where: str):
    return lambda message: AcceptedFileError(f"{where}: {message}")


def parse(data: Any, path: str) -> AcceptedFile:
    """Validates a decoded accepted file (`path` is used in the messages only)."""
    if not isinstance(data, dict):
        raise AcceptedFileError(f"{path}: the top level must be a JSON object")
    typed.check_keys(data, _error(path), _TOP_KEYS)
    if data["schema"] != SCHEMA:
        raise AcceptedFileError(f"{path}: schema {data['schema']!r} is not {SCHEMA}")
    current = typed.string(data, "current", _error(path))
    candidate = typed.string(data, "candidate", _error(path))
    if not isinstance(data["accepted"], list):
        raise AcceptedFileError(f"{path}: 'accepted' must be a list of objects")
    seen: set[str] = set()
    accepted = []
    for index, item in enumerate(data["accepted"]):
        where = f"{path}: accepted[{index}]"
        if not isinstance(item, dict):
            raise AcceptedFileError(f"{where}: must be an object with keys {', '.join(_ENTRY_KEYS)}")
        entry = item.get("entry")
        if isinstance(entry, str):
            where = f"{path}: entry {entry!r}"
        typed.check_keys(item, _error(where), _ENTRY_KEYS)
        entry = typed.string(item, "entry", _error(where))
        digest = typed.string(item, "candidate_ids_sha256", _error(where))
        reason = typed.string(item, "reason", _error(where))
        if not typed.SHA256_RE.match(digest):
            raise AcceptedFileError(f"{where}: candidate_ids_sha256 {digest!r} is not 64 lowercase hex "
                                    "digits; copy the hash the gate prints for this entry")
        if not reason.strip():
            raise AcceptedFileError(f"{where}: the reason is empty; say what changed in the template "
                                    "handling and whether the model sees different text")
        if entry in seen:
            raise AcceptedFileError(f"{where}: accepted twice; keep one acceptance per entry")
        seen.add(entry)
        accepted.append(Acceptance(entry, digest, reason))
    return AcceptedFile(path, current, candidate, tuple(accepted))


def load(path: Path, display: str | None = None) -> AcceptedFile:
    """Reads and validates the file; `display` is the repository path used in messages."""
    name = display or str(path)
    data = typed.load_json(path, _error(name), "create it with the header "
                           f'{{"schema": {SCHEMA}, "current": ..., "candidate": ..., "accepted": []}}')
    return parse(data, name)
