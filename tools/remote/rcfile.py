"""Fills in tools/remote/remote.bazelrc.template: every @NAME@ placeholder, each exactly once."""

from __future__ import annotations

import re

PLACEHOLDER = re.compile(r"@([A-Z][A-Z0-9_]*)@")


class RcError(ValueError):
    pass


def placeholders(template: str) -> set[str]:
    return set(PLACEHOLDER.findall(template))


def render(template: str, values: dict[str, str], *, source: str = "remote.bazelrc.template") -> str:
    """The template with every placeholder replaced; a missing or unused value is an error."""
    wanted = placeholders(template)
    missing = sorted(wanted - values.keys())
    unused = sorted(values.keys() - wanted)
    if missing or unused:
        raise RcError(f"{source}: placeholders without a value: {missing}; values no placeholder takes: {unused}")
    for name, value in values.items():
        # One rc line per flag: a newline or a blank would split or end the flag's value.
        if not value or any(c.isspace() for c in value):
            raise RcError(f"{source}: the value for @{name}@ is empty or contains whitespace")
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], template)
