"""Value checks shared by the table loaders: env interpolation, secrets."""

from __future__ import annotations

import re

ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")
# Compose interpolation forms: ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?msg}, ${VAR?msg}.
INTERPOLATION_RE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")
# A secret's value must be exactly one interpolation without a value of its own: ${VAR},
# ${VAR:?msg}, or ${VAR:-} (optional: empty when the host does not set it).
SECRET_VALUE_RE = re.compile(r"^\$\{[A-Za-z_][A-Za-z0-9_]*(?::\?[^}]*|:-)?\}$")
SECRET_NAME_RE = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|PRIVATE_KEY|CREDENTIAL)")


def interpolation_problem(value: str) -> str | None:
    """Why `value` has a `$` compose would reject or misread, or None when every `$` is valid."""
    i = 0
    while True:
        i = value.find("$", i)
        if i < 0:
            return None
        if value.startswith("$$", i):
            i += 2
            continue
        match = INTERPOLATION_RE.match(value, i)
        if not match:
            return (f"{value!r} has a '$' at offset {i} that is neither '$$' nor a "
                    "${VAR}, ${VAR:-default} or ${VAR:?message} interpolation")
        i = match.end()


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME_RE.search(name))


def secret_problem(name: str, value: str) -> str | None:
    """Why a secret env var's value is not an env interpolation. Never echoes the value."""
    if SECRET_VALUE_RE.match(value):
        return None
    return (f"{name} holds a literal value, but secrets come from the host env map: write "
            f"\"${{{name}}}\", \"${{{name}:?set {name}}}\" or, if optional, \"${{{name}:-}}\" "
            "(a non-empty default would be a secret in the file)")
