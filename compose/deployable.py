"""The deployability gate: every reason a compose file cannot be deployed, each with its fix.

    bazel run //compose:deployable -- compose/GLM-5.3-Flash-SGL-TP4.yaml ...

Reasons, read from the file itself and checked against the pin table
(pins/repository_locations.bzl) and the release records (recipes/releases/*.json):
  * a value the pin table has not resolved yet (the UNRESOLVED sentinel) in an image, a model
    revision, a file hash: fix `bazel run //pins:resolve -- NAME`;
  * an engine image that is not a release record of this checkout: fix `bazel run //compose:update`;
  * an engine release built on the cpu-test base (a production recipe built without
    --config=prod): fix the `--config=prod` release of its recipe; not published: its push;
  * a patch kill switch whose value is not a non-negative number.
An empty list means deployable. The rollout tool refuses a file for which this list is not empty.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ruamel.yaml import YAML  # noqa: E402

from pins import table as pin_table  # noqa: E402
from tools.oci.reference import ReferenceError, parse_reference  # noqa: E402
from tools.release import schema  # noqa: E402

# No resolve(): under Bazel the runfiles tree (not the source tree) holds the bound records.
RECORDS_DIR = Path(os.path.abspath(__file__)).parent.parent / "recipes" / "releases"
# ${VAR:-default} or a literal: the value a kill switch may take.
SWITCH_VALUE_RE = re.compile(r"^(?:\$\{[A-Z_][A-Z0-9_]*:-(?P<default>[^}]*)\}|(?P<literal>.*))$")
NUMBER_RE = re.compile(r"^[0-9]+(?:\.[0-9]+)?$")
RELEASE_FIX = "bazel run --config=prod {recipe}.release -- --repository {repository}"
PUSH_FIX = "bazel run --config=prod {recipe}.push -- --repository {repository} --tag TAG"


@dataclass(frozen=True)
class Reason:
    message: str
    fix: str  # the command that removes this reason


def _strings(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """(dotted path, string) for every string under value, multi-line strings line by line."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _strings(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, f"{path}[{i}]")
    elif isinstance(value, str):
        for line in value.splitlines() or [value]:
            yield path, line


def _hf_cache_dir(repository: str) -> str:
    return "models--" + repository.replace("/", "--")


def _mentions(pin: pin_table.Pin, line: str, argv: list[str], sentinel: str) -> bool:
    """Whether this line (or the argv it belongs to) uses `pin`'s unresolved value."""
    if sentinel not in line:
        return False
    if pin.kind == "image":
        return line == pin.image
    if pin.kind == "hf_file":
        return pin.path in line and (pin.repository in line
                                     or _hf_cache_dir(pin.repository) in line)
    if pin.kind == "hf_model":
        if f"hf download {pin.repository} --revision" in line:
            return True  # the downloader (a file download names the file after REPO)
        # An engine argv: --model-path REPO ... --revision <sentinel>
        return (line == sentinel and "--model-path" in argv
                and argv[argv.index("--model-path") + 1:][:1] == [pin.repository])
    return False


def _pin_reasons(where: str, services: Mapping[str, Any], pins: pin_table.PinTable) -> list[Reason]:
    sentinel = pins.unresolved
    used: dict[str, list[str]] = {}
    stray: list[str] = []
    for name, service in services.items():
        if not isinstance(service, Mapping):
            continue
        command = service.get("command")
        argv = [str(a) for a in command] if isinstance(command, list) else []
        for path, line in _strings(service, f"services.{name}"):
            if sentinel not in line:
                continue
            hits = [p.name for p in pins.pins.values()
                    if not p.resolved and _mentions(p, line, argv, sentinel)]
            for hit in hits:
                if path not in used.setdefault(hit, []):
                    used[hit].append(path)
            if not hits:
                stray.append(path)
    out = []
    for pin_name, paths in sorted(used.items()):
        pin = pins.pins[pin_name]
        fix = pin.resolve_command
        if pin.intended == sentinel:
            fix += " --tag TAG"
        what = f"{pin.repository}" + (f" {pin.path}" if pin.path else "")
        intended = "no intended tag recorded" if pin.intended == sentinel else f"intended {pin.intended}"
        out.append(Reason(f"{where}: pin {pin_name} ({what}, {intended}) is unresolved; used at "
                          + ", ".join(paths), fix))
    for path in stray:
        out.append(Reason(f"{where}: {path} holds the UNRESOLVED sentinel but names no pin of "
                          f"{pins.path}", "bazel run //compose:update"))
    return out


def _engine_reasons(where: str, services: Mapping[str, Any], pins: pin_table.PinTable,
                    records: Mapping[str, schema.Record]) -> list[Reason]:
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
            elif pin.image != ref.pinned:
                out.append(Reason(f"{where}: services.{name}.image {image} is not the pinned "
                                  f"{pin.image}", "bazel run //compose:update"))
            continue
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
                    record: schema.Record) -> list[Reason]:
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


def load_records(directory: Path = RECORDS_DIR) -> dict[str, schema.Record]:
    """Release records by the image they name (repository@digest)."""
    records = {}
    for path in sorted(Path(directory).glob("*.json")):
        record = schema.read(path)
        records[record.image] = record
    return records


def reasons_in(doc: Any, where: str, pins: pin_table.PinTable,
               records: Mapping[str, schema.Record]) -> list[Reason]:
    """The reasons for a parsed compose document (the generator asks before writing a header)."""
    services = doc.get("services") if isinstance(doc, Mapping) else None
    if not isinstance(services, Mapping) or not services:
        return [Reason(f"{where}: no services", "bazel run //compose:update")]
    return _pin_reasons(where, services, pins) + _engine_reasons(where, services, pins, records)


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
        except (OSError, pin_table.PinError, schema.RecordError) as err:
            print(f"{file}: error: {err}", file=sys.stderr)
            return 2
        for reason in listed:
            print(f"{reason.message.replace(str(path), str(file), 1)} -- fix: {reason.fix}")
        if not listed:
            print(f"{file}: deployable")
        found += len(listed)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
