"""Plans a single-replica rollout between two compose files and prints the deploy calls.

    ./tools/bazel run //tools/rollout -- plan \\
        --from compose/<file>@<git rev> --to compose/<file> --services <service>... \\
        [--tag TAG] [--env-file host.env]

Compares the deployed file (read from git at <rev>) with the target service by service (image,
command, environment, devices, labels, volumes) and prints which services would be created,
recreated or removed. It refuses unless the plan touches exactly the named services and removes
nothing. Then it prints the compose-manager calls in order: `compose/down` of each named service
with the file that defines it (never let orphan removal do the switch), `compose/up` of the new
file scoped to the named services (`dry_run: true` first, `force_recreate: false`, the whole host
env map), and the rollback calls.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

COMPARED_KEYS = ("image", "command", "environment", "devices", "labels", "volumes")
WHOLE_ENV_PLACEHOLDER = "<the host's whole env map from the gpu-manager dashboard: pass it whole>"


class PlanError(Exception):
    pass


@dataclass(frozen=True)
class ComposeSource:
    path: str
    rev: str | None  # None: the file in the work tree

    @classmethod
    def parse(cls, text: str) -> "ComposeSource":
        path, sep, rev = text.partition("@")
        return cls(path, rev if sep else None)

    def __str__(self) -> str:
        return f"{self.path}@{self.rev}" if self.rev else self.path

    def read(self, workspace: Path) -> str:
        if self.rev is None:
            file = workspace / self.path
            if not file.is_file():
                raise PlanError(f"{self.path}: no such file in {workspace}")
            return file.read_text()
        proc = subprocess.run(["git", "-C", str(workspace), "show", f"{self.rev}:{self.path}"], capture_output=True, text=True)
        if proc.returncode != 0:
            raise PlanError(f"{self}: cannot read it from git: {proc.stderr.strip()}")
        return proc.stdout


def load_services(source: ComposeSource, text: str) -> dict[str, dict[str, Any]]:
    try:
        doc = YAML(typ="safe", pure=True).load(text)
    except YAMLError as err:
        raise PlanError(f"{source}: invalid YAML: {err}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("services"), dict):
        raise PlanError(f"{source}: not a compose file (no `services` mapping)")
    return doc["services"]


def _normalized(service: dict[str, Any], key: str) -> Any:
    value = service.get(key)
    if key == "devices":
        reservations = service.get("deploy", {}).get("resources", {}).get("reservations", {}).get("devices")
        value = {"devices": value, "gpus": reservations}
    if key == "environment" and isinstance(value, list):
        value = dict(item.split("=", 1) if "=" in item else (item, None) for item in value)
    if key == "labels" and isinstance(value, list):
        value = dict(item.split("=", 1) if "=" in item else (item, "") for item in value)
    return value


@dataclass
class Plan:
    created: list[str] = field(default_factory=list)
    recreated: dict[str, list[str]] = field(default_factory=dict)  # service -> changed keys
    removed: list[str] = field(default_factory=list)

    @property
    def touched(self) -> set[str]:
        return set(self.created) | set(self.recreated)


def diff_services(deployed: dict[str, dict], target: dict[str, dict]) -> Plan:
    plan = Plan()
    for name in sorted(target):
        if name not in deployed:
            plan.created.append(name)
            continue
        changed = [k for k in COMPARED_KEYS if _normalized(deployed[name], k) != _normalized(target[name], k)]
        if changed:
            plan.recreated[name] = changed
    plan.removed = sorted(set(deployed) - set(target))
    return plan


def refusals(plan: Plan, services: list[str]) -> list[str]:
    reasons = []
    named = set(services)
    if plan.removed:
        reasons.append(f"the target file would remove (orphan) {', '.join(plan.removed)}; nothing may be removed")
    extra = sorted(plan.touched - named)
    if extra:
        details = "; ".join(f"{s} ({', '.join(plan.recreated.get(s, ['new service']))})" for s in extra)
        reasons.append(f"the plan also touches services not named with --services: {details}")
    untouched = sorted(named - plan.touched)
    if untouched:
        reasons.append(f"named services the plan would not change: {', '.join(untouched)}")
    return reasons


def deploy_calls(source: ComposeSource, target: ComposeSource, services: list[str], tag: str | None, env: Any) -> dict[str, list[dict]]:
    def call(op: str, file: ComposeSource, tag_: str | None, dry_run: bool | None = None) -> dict:
        body: dict[str, Any] = {"call": op, "file": file.path, "tag": tag_, "services": list(services)}
        if op == "compose/up":
            body.update(dry_run=dry_run, force_recreate=False)
        body["env"] = env
        return body

    return {
        "deploy": [
            call("compose/down", source, source.rev),
            call("compose/up", target, tag, dry_run=True),
            call("compose/up", target, tag, dry_run=False),
        ],
        "rollback": [
            call("compose/down", target, tag),
            call("compose/up", source, source.rev, dry_run=True),
            call("compose/up", source, source.rev, dry_run=False),
        ],
    }


def read_env_file(path: Path) -> dict[str, str]:
    env = {}
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise PlanError(f"{path}:{lineno}: expected KEY=VALUE, got {line!r}")
        env[key.strip()] = value
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rollout", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="plan a rollout and print the deploy calls")
    p.add_argument("--from", dest="source", required=True, type=ComposeSource.parse, help="deployed file: PATH@GIT_REV")
    p.add_argument("--to", dest="target", required=True, type=ComposeSource.parse, help="target file: PATH (work tree) or PATH@REV")
    p.add_argument("--services", nargs="+", required=True, help="the services this rollout may touch")
    p.add_argument("--tag", help="the git tag compose-manager deploys the target from")
    p.add_argument("--env-file", type=Path, help="the host's whole env map (KEY=VALUE lines)")
    args = parser.parse_args(argv)
    workspace = Path(os.environ.get("BUILD_WORKSPACE_DIRECTORY", "."))
    cwd = Path(os.environ.get("BUILD_WORKING_DIRECTORY", "."))
    try:
        if args.source.rev is None:
            raise PlanError(f"--from {args.source}: give the deployed revision as PATH@GIT_REV")
        deployed = load_services(args.source, args.source.read(workspace))
        target = load_services(args.target, args.target.read(workspace))
        plan = diff_services(deployed, target)
        print(f"plan {args.source} -> {args.target}")
        for name in plan.created:
            print(f"  create    {name}")
        for name, keys in plan.recreated.items():
            print(f"  recreate  {name}: {', '.join(keys)} changed")
        for name in plan.removed:
            print(f"  remove    {name}")
        if not (plan.created or plan.recreated or plan.removed):
            print("  (no service changes)")
        reasons = refusals(plan, args.services)
        if reasons:
            for reason in reasons:
                print(f"rollout: REFUSED: {reason}", file=sys.stderr)
            return 1
        env = read_env_file(cwd / args.env_file) if args.env_file else WHOLE_ENV_PLACEHOLDER
        print(json.dumps(deploy_calls(args.source, args.target, args.services, args.tag, env), indent=2))
        return 0
    except PlanError as err:
        print(f"rollout: ERROR: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
