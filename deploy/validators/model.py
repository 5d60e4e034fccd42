"""The canonical model: what the pinned Compose binary makes of a file (`config --format json`).

Anchors, `<<` merges, short/long syntax and interpolation are Compose's own, so a rule that reads
this model sees what `docker compose up` would run. Every profile is enabled (`COMPOSE_PROFILES=*`)
so operator-only services are checked too. Two views are read: `doc`, interpolated with the CI
dummy environment (what runs), and `raw`, with `--no-interpolate` (what the file says, e.g. a
literal token versus `${VAR}`). In both, Compose re-escapes a literal `$` as `$$`.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from deploy.validators.compose_doc import CI_DUMMY_ENV, ComposeFile, Finding, LoadError, shared


PROJECT = "validated"


@dataclass
class Model:
    """One compose file as Compose resolves it; `label` is how findings name the file."""

    label: str
    path: Path
    doc: dict[str, Any]  # interpolated with the CI dummy environment
    raw: dict[str, Any]  # --no-interpolate

    @property
    def services(self) -> dict[str, Any]:
        return self.doc.get("services") or {}

    def finding(self, path: str, message: str) -> Finding:
        return Finding(self.label, path, message)

    def as_compose_file(self) -> ComposeFile:
        """The interpolated model behind the ComposeFile interface the topology helpers take."""
        return ComposeFile(label=self.label, path=self.path, text="", doc=self.doc)


def compose_json(path: Path, compose_bin: str, interpolate: bool = True,
                 env: Mapping[str, str] = CI_DUMMY_ENV) -> dict[str, Any]:
    """`docker-compose -f FILE config --format json` with only `env`; LoadError on refusal.

    Inside `shared_reads()` the binary runs once per file, flags and environment (its output
    is kept as text, so every caller gets a document of its own)."""
    try:
        content = path.read_bytes()
    except OSError:
        content = None  # not kept: the binary reports the unreadable file itself
    if content is None:
        stdout = _compose_config(path, compose_bin, interpolate, env)
    else:
        # The file's directory is part of the key: Compose resolves relative paths against it.
        key = ("compose-config", compose_bin, str(path.absolute()), content, interpolate,
               tuple(sorted(env.items())))
        stdout = shared(key, lambda: _compose_config(path, compose_bin, interpolate, env))
    try:
        return json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise LoadError(f"docker compose config printed no JSON model: {exc}") from None


def _compose_config(path: Path, compose_bin: str, interpolate: bool,
                    env: Mapping[str, str]) -> str:
    argv = [compose_bin, "-f", str(path.absolute()), "config", "--format", "json"]
    if not interpolate:
        argv.append("--no-interpolate")
    with tempfile.TemporaryDirectory(prefix="compose-model-") as home:
        run_env = {"PATH": "/usr/bin:/bin", "HOME": home, "DOCKER_CONFIG": home,
                   "COMPOSE_DISABLE_ENV_FILE": "1", "COMPOSE_PROFILES": "*",
                   # Fixed, so project-scoped names (volumes, configs) do not depend on where
                   # the file lies: a copy and its source resolve alike.
                   "COMPOSE_PROJECT_NAME": PROJECT, **env}
        try:
            proc = subprocess.run(argv, env=run_env, cwd=home, capture_output=True, text=True,
                                  timeout=120)
        except OSError as exc:
            raise LoadError(f"cannot run the Compose binary {compose_bin}: {exc}") from None
    if proc.returncode != 0:
        detail = " ".join(proc.stderr.split()) or f"exit {proc.returncode}"
        raise LoadError(f"docker compose config refuses the file: {detail}")
    return proc.stdout


def load_model(path: Path, label: str, compose_bin: str) -> Model:
    if not path.is_file():
        raise LoadError(f"{label}: file not found (pass an existing compose file)")
    try:
        doc = compose_json(path, compose_bin)
        raw = compose_json(path, compose_bin, interpolate=False)
    except LoadError as exc:
        raise LoadError(f"{label}: {exc}") from None
    return Model(label, path, doc, raw)


def default_compose_bin() -> str:
    return os.environ.get("COMPOSE_BIN", "")
