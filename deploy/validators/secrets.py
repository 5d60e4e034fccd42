"""Secrets by value: detect-secrets over every string of the Compose model, never printing one.

Each string of the model (`--no-interpolate`, so `${VAR}` references stay references) becomes
one line `"<value>"` of a scratch file, plus one quoted line per whitespace-separated word, so
detect-secrets' quoted-string entropy and format detectors (GitHub, AWS, Slack, OpenAI, JWT,
private keys, ...) see it; `huggingface_plugin.py` adds Hugging Face `hf_…` tokens. Findings
map a line back to the dotted path of the string. The value itself is never reported.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from detect_secrets import SecretsCollection
from detect_secrets.settings import transient_settings

from deploy.validators.compose_doc import join_path

PLUGIN_FILE = Path(__file__).resolve().parent / "huggingface_plugin.py"

# detect-secrets' format detectors plus base64 entropy on quoted words. Hex entropy is left out:
# digests and Hub revisions are hex by design, and every hex secret format has a detector here.
PLUGINS = (
    "ArtifactoryDetector", "AWSKeyDetector", "AzureStorageKeyDetector", "BasicAuthDetector",
    "DiscordBotTokenDetector", "GitHubTokenDetector", "GitLabTokenDetector", "JwtTokenDetector",
    "NpmDetector", "OpenAIDetector", "PrivateKeyDetector", "PypiTokenDetector",
    "SendGridDetector", "SlackDetector", "StripeDetector", "TelegramBotTokenDetector",
    "TwilioKeyDetector",
)
BASE64_LIMIT = 4.5

# Names whose value is a credential: a literal value under such a name is reported even when
# it looks harmless to the value detectors (`PROXY_TOKEN: hunter2`).
SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|PRIVATE_KEY|CREDENTIAL)",
                         re.I)
REFERENCE = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*(:?[?-][^}]*)?\}$")


@dataclass(frozen=True)
class SecretHit:
    path: str  # dotted path in the compose model
    kind: str  # detector name, never the value


def strings(node: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield from strings(value, join_path(path, str(key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from strings(value, join_path(path, i))
    elif isinstance(node, str):
        yield path, node


def _settings() -> dict[str, Any]:
    plugins: list[dict[str, Any]] = [{"name": n} for n in PLUGINS]
    plugins.append({"name": "Base64HighEntropyString", "limit": BASE64_LIMIT})
    plugins.append({"name": "HuggingFaceTokenDetector", "path": PLUGIN_FILE.as_uri()})
    return {"plugins_used": plugins,
            "filters_used": [{"path": "detect_secrets.filters.heuristic.is_sequential_string"},
                             {"path": "detect_secrets.filters.heuristic.is_templated_secret"}]}


def scan(model_raw: dict[str, Any]) -> list[SecretHit]:
    """Every string of the model that detect-secrets reports, by dotted path and detector."""
    # Each distinct line once, at its first occurrence, mapped to the path of that occurrence.
    # About half the lines of a generated file repeat (the replicas' argv, shared labels). The
    # scan is line-local (these plugins and filters read only the line, the secret and the file
    # name; verification, which reads neighbouring lines, is off), and detect-secrets keeps one
    # hit per secret and type, the first line's: so this reports what scanning every line did.
    first_path: dict[str, str] = {}
    for path, value in strings(model_raw):
        for text in value.splitlines() or [value]:
            candidates = [text] + [w for w in re.split(r"[\s=,]+", text) if w and w != text]
            for word in candidates:
                first_path.setdefault(json.dumps(word), path)
    lines = list(first_path)
    where = list(first_path.values())
    hits: dict[tuple[str, str], SecretHit] = {}
    with tempfile.TemporaryDirectory(prefix="secret-scan-") as tmp:
        scratch = Path(tmp) / "model.txt"
        scratch.write_text("\n".join(lines) + "\n")
        with transient_settings(_settings()):
            collection = SecretsCollection()
            collection.scan_file(str(scratch))
        for _, secret in collection:
            path = where[secret.line_number - 1]
            hits.setdefault((path, secret.type), SecretHit(path, secret.type))
    return sorted(hits.values(), key=lambda h: (h.path, h.kind))


# `${VAR:-default}` / `${VAR-default}`: the default is what runs when the host leaves VAR unset.
DEFAULTED = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*):?-([^}]*)\}")


def named_literals(model_raw: dict[str, Any]) -> list[str]:
    """Dotted paths of environment entries whose name says credential but whose value is a
    literal, not a `${VAR}` reference to the host's environment. A non-empty fallback
    (`${TOKEN:-changeme}`) is a literal: a host without TOKEN runs with it."""
    paths = []
    for name, service in (model_raw.get("services") or {}).items():
        for key, value in ((service or {}).get("environment") or {}).items():
            if value and SECRET_NAME.search(key) and (not REFERENCE.match(str(value))
                                                      or literal_fallback(str(value))):
                paths.append(join_path("services", name, "environment", key))
    return paths


def literal_fallback(value: str) -> bool:
    """A `${VAR:-default}` with a non-empty default (`${VAR:-}` only makes VAR optional)."""
    return any(default for _, default in DEFAULTED.findall(value))


def fallback_paths(model_raw: dict[str, Any]) -> list[str]:
    """Dotted paths of strings anywhere in the model that default a credential-named host
    variable to a literal (`--api-key ${API_KEY:-dev}`)."""
    return [path for path, value in strings(model_raw)
            if any(default and SECRET_NAME.search(var) for var, default in DEFAULTED.findall(value))]


def shown(key: str, value: str | None) -> str:
    """A value for a message: repr when harmless, else only its shape (never the secret)."""
    if value is None:
        return "unset"
    if REFERENCE.match(value) and not literal_fallback(value):
        return repr(value)
    if REFERENCE.match(value) and SECRET_NAME.search(key + value):
        name = value[2:].split(":", 1)[0].split("-", 1)[0]
        return f"'${{{name}:-<a literal, not shown>}}'"
    if SECRET_NAME.search(key) or looks_secret(value):
        return f"<a literal of {len(value)} characters, not shown>"
    return repr(value)


def looks_secret(value: str) -> bool:
    return bool(scan({"value": value}))
