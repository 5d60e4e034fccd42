"""The deployability gate: every reason a compose file cannot be deployed, each with its fix.

    bazel run //compose:deployable -- compose/GLM-5.3-Flash-SGL-TP4.yaml ...

Reasons, read from the file itself and checked against the pin table
(pins/repository_locations.bzl) and the release records (recipes/releases/*.json):
  * a pin the table has not resolved yet, used by an image, a model revision, a file hash:
    fix `bazel run //pins:resolve -- NAME`;
  * a value where a pin is used (image digest, Hub revision, file sha256; pins/uses.py) that
    is neither the pin's value nor, while the pin is unresolved, the UNRESOLVED sentinel (e.g.
    `--revision main`, another commit on one replica): fix `bazel run //compose:update`;
  * an engine image that is not a release record of this checkout: fix `bazel run //compose:update`;
  * an engine release built on the cpu-test base (a production recipe built without
    --config=prod): fix the `--config=prod` release of its recipe; not published: its push.
    While the production base pin is unresolved, pinning it is their first prerequisite (a
    reason of its own, named by each of them);
  * a patch kill switch whose value is not a non-negative number.
An empty list means deployable. The rollout tool refuses a file for which this list is not empty.
The CLI prints the reasons grouped by fix, prerequisites first.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Mapping

from ruamel.yaml import YAML

from deploy import releases
from pins import table as pin_table
from pins import uses as pin_uses
from tools.oci.reference import ReferenceError, parse_reference

# No resolve(): under Bazel the runfiles tree (not the source tree) holds the bound records.
RECORDS_DIR = Path(os.path.abspath(__file__)).parent.parent / "recipes" / "releases"
# ${VAR:-default} or a literal: the value a kill switch may take.
SWITCH_VALUE_RE = re.compile(r"^(?:\$\{[A-Z_][A-Z0-9_]*:-(?P<default>[^}]*)\}|(?P<literal>.*))$")
NUMBER_RE = re.compile(r"^[0-9]+(?:\.[0-9]+)?$")
RELEASE_FIX = "bazel run --config=prod {recipe}.release -- --repository {repository}"
PUSH_FIX = "bazel run --config=prod {recipe}.push -- --repository {repository} --tag TAG"
UPDATE_FIX = "bazel run //compose:update"
# The production base every --config=prod build starts from, and how it is pinned.
PROD_BASE_PIN = "sglang_prod_base"
PROD_BASE_FIX = "bazel run //recipes/bases:pin_prod -- {repository}:TAG"


@dataclass(frozen=True)
class Reason:
    message: str
    fix: str  # the command that removes this reason
    after: str = ""  # a fix that must have run first (the production base before --config=prod)


@dataclass(frozen=True)
class Group:
    fix: str
    after: str
    reasons: tuple[Reason, ...]


def grouped(reasons: list[Reason]) -> list[Group]:
    """Reasons by fix, in first-seen order, every prerequisite before the fixes that need it."""
    order: dict[tuple[str, str], list[Reason]] = {}
    for reason in reasons:
        order.setdefault((reason.fix, reason.after), []).append(reason)
    groups = [Group(fix, after, tuple(items)) for (fix, after), items in order.items()]
    return sorted(groups, key=lambda g: (bool(g.after), any(h.after == g.fix for h in groups)))


def report(label: str, reasons: list[Reason]) -> list[str]:
    """What the CLI prints for one file: `deployable`, or the reasons grouped by fix."""
    if not reasons:
        return [f"{label}: deployable"]
    groups = grouped(reasons)
    lines = [f"{label}: NOT DEPLOYABLE: {len(reasons)} reasons, {len(groups)} fixes"]
    for number, group in numbered(groups):
        lines.append(f"  fix {number}: {group.fix}")
        lines += [f"    - {r.message}" for r in group.reasons]
    return lines


def numbered(groups: list[Group]) -> list[tuple[str, Group]]:
    """`N` or `N (after fix M)` for each group, M the group of its prerequisite."""
    numbers = {g.fix: i for i, g in enumerate(groups, start=1)}
    return [(f"{i} (after fix {numbers[g.after]})" if g.after in numbers else str(i), g)
            for i, g in enumerate(groups, start=1)]


def _strings(value: Any, path: str) -> Iterator[tuple[str, int, str]]:
    """(dotted path, line number, line) for every string under value (multi-line strings line by
    line)."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{path}[{i}]")
    elif isinstance(value, str):
        for number, line in enumerate(value.splitlines() or [value], start=1):
            yield path, number, line


def _uses(services: Mapping[str, Any],
          pins: pin_table.PinTable) -> list[tuple[pin_table.Pin, pin_uses.Use]]:
    """Every place a pin's value appears: sidecar image digests, Hub revisions and hashes."""
    out = []
    for name, service in services.items():
        if not isinstance(service, Mapping):
            continue
        image = service.get("image")
        if isinstance(image, str):
            try:
                ref = parse_reference(image, f"services.{name}.image", unresolved=pins.unresolved)
            except ReferenceError:
                ref = None  # reported by _engine_reasons
            pin = pins.by_image_repository(str(ref.repository)) if ref else None
            if pin is not None:
                value = pins.unresolved if ref.unresolved else (ref.digest or "(no digest)")
                out.append((pin, pin_uses.Use(f"services.{name}.image", 0, pin.repository,
                                              None, "digest", value)))
        command = service.get("command")
        argv = [str(a) for a in command] if isinstance(command, list) else []
        entrypoint = service.get("entrypoint")
        found = list(pin_uses.argv_uses(f"services.{name}.command", argv))
        if isinstance(entrypoint, list) and "-c" in entrypoint and argv:
            found += pin_uses.script_uses(f"services.{name}.command[0]", argv[0])
        for use in found:
            pin = pins.by_hub_repository(use.repository, use.file)
            if pin is not None:
                out.append((pin, use))
    return out


def _pin_reasons(where: str, services: Mapping[str, Any], pins: pin_table.PinTable) -> list[Reason]:
    sentinel = pins.unresolved
    used: dict[str, list[str]] = {}
    seen: set[tuple[str, int]] = set()
    out = []
    for pin, use in _uses(services, pins):
        seen.add((use.where, use.line or 1))
        value = getattr(pin, use.field)
        if use.where not in used.setdefault(pin.name, []):
            used[pin.name].append(use.where)
        if use.value == value:
            continue
        at = use.where + (f" line {use.line}" if use.line else "")
        if use.value == sentinel:
            out.append(Reason(f"{where}: {at} holds the UNRESOLVED sentinel, but pin {pin.name} "
                              f"is resolved ({use.field} {value})", UPDATE_FIX))
        else:
            allowed = "the sentinel" if value == sentinel else f"{value}"
            out.append(Reason(f"{where}: {at} has {use.field} {use.value!r}, which is neither pin "
                              f"{pin.name}'s value ({allowed}) nor the UNRESOLVED sentinel", UPDATE_FIX))
    pin_out = []
    for pin_name, paths in sorted(used.items()):
        pin = pins.pins[pin_name]
        if pin.resolved:
            continue
        fix = pin.resolve_command
        if pin.intended == sentinel:
            fix += " --tag TAG"
        what = f"{pin.repository}" + (f" {pin.path}" if pin.path else "")
        intended = "no intended tag recorded" if pin.intended == sentinel else f"intended {pin.intended}"
        pin_out.append(Reason(f"{where}: pin {pin_name} ({what}, {intended}) is unresolved; used "
                              "at " + ", ".join(paths), fix))
    for path, number, line in _strings(dict(services), "services"):
        if sentinel in line and (path, number) not in seen:
            seen.add((path, number))
            out.append(Reason(f"{where}: {path} holds the UNRESOLVED sentinel but names no pin of "
                              f"{pins.path}", UPDATE_FIX))
    return pin_out + out


def _engine_reasons(where: str, services: Mapping[str, Any], pins: pin_table.PinTable,
                    records: Mapping[str, releases.ReleaseRecord]) -> list[Reason]:
    out = []
    for name, service in services.items():
        if not isinstance(service, Mapping) or not isinstance(service.get("image"), str):
            continue
        image = service["image"]
        try:
            ref = parse_reference(image, f"services.{name}.image", unresolved=pins.unresolved)
        except ReferenceError as err:
            out.append(Reason(f"{where}: {err}", "bazel run //compose:update"))
            continue
        if ref.unresolved:
            continue  # reported as an unresolved pin
        if ref.digest is None:
            out.append(Reason(f"{where}: services.{name}.image {image} is not pinned by digest",
                              "bazel run //compose:update"))
            continue
        record = records.get(ref.pinned)  # the digest wins: a tag beside it changes nothing
        if record is None:
            pin = pins.by_image_repository(str(ref.repository))
            if pin is None:
                out.append(Reason(f"{where}: services.{name}.image {image} is neither a pin of the "
                                  "pin table nor a release record of this checkout",
                                  "bazel run //compose:update"))
            continue  # a pinned sidecar image: compared with its pin by _pin_reasons
        where_to = dict(recipe=record.recipe, repository=record.repository)
        if record.base.flavor != "production":
            # Record the production build first (push refuses a record of another digest).
            out.append(Reason(f"{where}: services.{name} runs {record.recipe} built on the "
                              f"{record.base.flavor} base {record.base.name} (CPU torch; it cannot "
                              "serve on a GPU): the recipe must be built with --config=prod",
                              RELEASE_FIX.format(**where_to)))
        if not record.published:
            out.append(Reason(f"{where}: services.{name} runs {record.recipe} "
                              f"({record.image}), which is not published",
                              PUSH_FIX.format(**where_to)))
        out += _switch_reasons(where, name, service, record)
    return out


def _switch_reasons(where: str, name: str, service: Mapping[str, Any],
                    record: releases.ReleaseRecord) -> list[Reason]:
    env = service.get("environment")
    if not isinstance(env, Mapping):
        return []
    out = []
    for patch in record.patches:
        disable = str(patch.switch.get("disable") or "")
        variable = disable.partition("=")[0]
        if not variable or variable not in env:
            continue
        match = SWITCH_VALUE_RE.match(str(env[variable]))
        value = match.group("default") if match.group("default") is not None else match.group("literal")
        if not NUMBER_RE.match(value):
            out.append(Reason(f"{where}: services.{name}.environment.{variable} = {env[variable]!r}: "
                              f"the {patch.name} switch takes a number of seconds ({disable} "
                              "turns it off)", "bazel run //compose:update"))
    return out


def load_records() -> dict[str, releases.ReleaseRecord]:
    """This checkout's release records by the image they name (repository@digest)."""
    return releases.load_dir(RECORDS_DIR).by_image()


def reasons_in(doc: Any, where: str, pins: pin_table.PinTable,
               records: Mapping[str, releases.ReleaseRecord]) -> list[Reason]:
    """The reasons for a parsed compose document (the generator asks before writing a header)."""
    services = doc.get("services") if isinstance(doc, Mapping) else None
    if not isinstance(services, Mapping) or not services:
        return [Reason(f"{where}: no services", "bazel run //compose:update")]
    return _prerequisites(where, _pin_reasons(where, services, pins)
                          + _engine_reasons(where, services, pins, records), pins)


def _prerequisites(where: str, reasons: list[Reason], pins: pin_table.PinTable) -> list[Reason]:
    """--config=prod builds start from the production base: while its pin is unresolved, pinning
    it is a reason of its own and the first step of every --config=prod fix."""
    base = pins.pins.get(PROD_BASE_PIN)
    if base is None or base.resolved or not any("--config=prod" in r.fix for r in reasons):
        return reasons
    fix = PROD_BASE_FIX.format(repository=base.repository)
    needed = [r for r in reasons if "--config=prod" in r.fix]
    first = Reason(f"{where}: pin {PROD_BASE_PIN} ({base.repository}) is unresolved; the "
                   f"--config=prod builds of {len(needed)} reason(s) start from it", fix)
    return [first] + [replace(r, after=fix) if r in needed else r for r in reasons]


def reasons(compose_file: Path) -> list[Reason]:
    """Every reason `compose_file` cannot be deployed; [] = deployable."""
    compose_file = Path(compose_file)
    doc = YAML(typ="safe").load(compose_file.read_text(encoding="utf-8"))
    return reasons_in(doc, str(compose_file), pin_table.load(), load_records())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deployable", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE", help="compose files")
    args = parser.parse_args(argv)
    base = Path(os.environ.get("BUILD_WORKING_DIRECTORY", "."))
    found = 0
    for file in args.files:
        path = file if file.is_absolute() else base / file
        try:
            listed = reasons(path)
        except (OSError, pin_table.PinError, releases.ReleaseError) as err:
            print(f"{file}: error: {err}", file=sys.stderr)
            return 2
        shown = [replace(r, message=r.message.replace(str(path), str(file), 1)) for r in listed]
        print("\n".join(report(str(file), shown)))
        found += len(listed)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
