"""The checks every reader of hand-written data shares: load, exact keys, types, common formats.

Readers of TOML, JSON and Starlark-literal tables (the compose variant tables, the pin table,
the prompt-parity accepted files) keep their own error class and their own "where" (the file,
the table, the row); each helper takes `error`, a function from a message to that reader's
exception, and words the problem one way: what is wrong with which key, and what it must be.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any, Callable, Mapping

Error = Callable[[str], Exception]

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
HF_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


def load_toml(path: Path, error: Error) -> dict[str, Any]:
    try:
        with Path(path).open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise error("file not found") from None
    except tomllib.TOMLDecodeError as err:
        raise error(f"not valid TOML: {err}") from None


def load_json(path: Path, error: Error, missing_fix: str = "") -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error("missing" + (f"; {missing_fix}" if missing_fix else "")) from None
    except json.JSONDecodeError as err:
        raise error(f"not valid JSON ({err})") from None


def mapping(value: Any, what: str, error: Error) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise error(f"{what} must be a table, got {type(value).__name__}")
    return value


def check_keys(data: Mapping[str, Any], error: Error, required: tuple[str, ...],
               optional: tuple[str, ...] = ()) -> None:
    """Exactly the `required` keys, and any of the `optional` ones."""
    unknown = [k for k in data if k not in required and k not in optional]
    missing = [k for k in required if k not in data]
    if unknown or missing:
        problems = ([f"unknown keys {unknown}"] if unknown else []) + \
                   ([f"missing keys {missing}"] if missing else [])
        known = ", ".join(required) + (f" (optional: {', '.join(optional)})" if optional else "")
        raise error(f"{', '.join(problems)}; the keys are {known}")


def string(data: Mapping[str, Any], key: str, error: Error,
           pattern: re.Pattern[str] | None = None, hint: str = "") -> str:
    """data[key], a string; with `pattern`, one that matches it (`hint`, e.g. " (host:port)")."""
    value = data[key]
    if not isinstance(value, str):
        raise error(f"{key} must be a string, got {value!r}")
    if pattern is not None and not pattern.match(value):
        raise error(f"{key} = {value!r} does not match {pattern.pattern}{hint}")
    return value


def integer(data: Mapping[str, Any], key: str, error: Error, minimum: int = 1) -> int:
    value = data[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise error(f"{key} must be an integer >= {minimum}, got {value!r}")
    return value


def boolean(data: Mapping[str, Any], key: str, error: Error) -> bool:
    value = data[key]
    if not isinstance(value, bool):
        raise error(f"{key} must be true or false, got {value!r}")
    return value


def string_list(data: Mapping[str, Any], key: str, error: Error,
                pattern: re.Pattern[str] | None = None) -> tuple[str, ...]:
    """data[key], a list of strings (each matching `pattern`); an absent key is an empty list."""
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise error(f"{key} must be a list of strings, got {value!r}")
    for v in value:
        if pattern is not None and not pattern.match(v):
            raise error(f"{key} entry {v!r} does not match {pattern.pattern}")
    return tuple(value)
