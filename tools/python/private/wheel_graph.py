"""The dependency graph of a lock's extracted wheels, for pip_parse's per-package libraries.

    wheel_graph.py SITE     # SITE/<name>/ holds one extracted wheel per locked package

Prints JSON {"closure": {name: [names]}, "unlocked": {name: [requirements]}}: for each
package, itself and everything it needs, transitively, from its `*.dist-info/METADATA`
Requires-Dist lines, with markers evaluated for this interpreter (the one the tests run on) and
the extras each requirement asks for. Cycles need no special case: a closure is a set. A
requirement whose marker holds but whose package the lock lacks is listed under "unlocked".

Runs inside a repository rule with /usr/bin/python3, so it uses the `packaging` library that
Debian's python3-pip vendors (PEP 508 markers and names) instead of a second parser.
"""

from __future__ import annotations

import email.parser
import json
import sys
from pathlib import Path

from pip._vendor.packaging.requirements import InvalidRequirement, Requirement
from pip._vendor.packaging.utils import canonicalize_name


def key(name: str) -> str:
    """The label form of a name (PEP 503 with `_`, like names.bzl's normalize)."""
    return canonicalize_name(name).replace("-", "_")


def requirements(site: Path, name: str) -> list[Requirement]:
    metas = sorted((site / name).glob("*.dist-info/METADATA"))
    if len(metas) != 1:
        raise SystemExit(f"wheel_graph.py: {site / name}: expected one *.dist-info/METADATA, found {len(metas)}")
    headers = email.parser.Parser().parsestr(metas[0].read_text(encoding="utf-8", errors="replace"), headersonly=True)
    out = []
    for line in headers.get_all("Requires-Dist") or []:
        try:
            out.append(Requirement(line))
        except InvalidRequirement as err:
            raise SystemExit(f"wheel_graph.py: {metas[0]}: Requires-Dist {line!r}: {err}") from None
    return out


def direct(site: Path, name: str, extras: set[str]) -> list[tuple[str, set[str]]]:
    """(dependency, its requested extras) of `name` installed with `extras`."""
    out = []
    for req in requirements(site, name):
        wanted = not req.marker or any(req.marker.evaluate({"extra": e}) for e in (extras | {""}))
        if wanted:
            out.append((key(req.name), set(req.extras)))
    return out


def graph(site: Path) -> dict:
    locked = sorted(p.name for p in site.iterdir() if p.is_dir())
    closure, unlocked = {}, {}
    for root in locked:
        seen: dict[str, set[str]] = {root: set()}
        todo = [(root, set())]
        while todo:
            name, extras = todo.pop()
            for dep, dep_extras in direct(site, name, extras):
                if dep not in locked:
                    unlocked.setdefault(root, []).append(dep)
                    continue
                new = dep_extras - seen.get(dep, set())
                if dep not in seen or new:
                    seen[dep] = seen.get(dep, set()) | dep_extras
                    todo.append((dep, seen[dep]))
        closure[root] = sorted(seen)
    return {"closure": closure, "unlocked": {k: sorted(set(v)) for k, v in unlocked.items()}}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    print(json.dumps(graph(Path(sys.argv[1])), indent=1, sort_keys=True))
