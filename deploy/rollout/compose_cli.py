"""The pinned Compose binary as the rollout sees it: canonical model, recreate hashes, lifecycle.

Every call runs `docker-compose -p PROJECT -f FILE [--env-file HOST_ENV] ...` with a process
environment of only PATH, HOME, DOCKER_HOST and DOCKER_CONFIG, so interpolation reads the
host's env map from the env file and nothing else. The env file's values are never printed:
Compose's own output is passed through `Redactor` before it reaches the terminal, and the
canonical model (which holds interpolated values) is parsed, never echoed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

# Compose's hash and model both need every `${VAR:?}` guard satisfied. Without the host's env
# file each required variable gets this value, on both revisions alike (`${VAR:-default}`
# keeps its default).
PLAN_PLACEHOLDER = "rollout-plan-placeholder"
_REQUIRED_VARIABLE = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*):?\?")
_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|ms|us|µs|ns|m|s)")
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
# A value shorter than this is not masked ("1", "true"): it would garble every line.
_MIN_SECRET_LEN = 6


class ComposeError(Exception):
    """Compose failed; the message is redacted."""


def go_duration_s(text: str, where: str) -> float:
    """Seconds of a Go duration as Compose's canonical model writes it (`5m0s`, `45s`)."""
    pos, total = 0, 0.0
    for match in _GO_DURATION.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _GO_UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ComposeError(f"{where}: {text!r} is not a duration Compose writes (e.g. 5m0s)")
    return total


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines (Compose's env-file format, without quotes handling beyond stripping)."""
    values = {}
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            # Only the key is named: the line may be a value pasted on its own.
            raise ComposeError(f"{path}:{lineno}: expected KEY=VALUE (line not shown: it may hold a value)")
        values[key.strip()] = value.strip().strip("'\"")
    return values


@dataclass(frozen=True)
class Redactor:
    """Masks the env file's values in any text that is about to be printed."""

    secrets: tuple[str, ...] = ()

    @classmethod
    def for_env_file(cls, path: Path | None) -> "Redactor":
        if path is None:
            return cls()
        values = {v for v in read_env_file(path).values() if len(v) >= _MIN_SECRET_LEN}
        return cls(tuple(sorted(values, key=len, reverse=True)))

    def __call__(self, text: str) -> str:
        for value in self.secrets:
            text = text.replace(value, "<redacted>")
        return text


@dataclass(frozen=True)
class ServiceState:
    """What decides whether a service's container must be replaced."""

    name: str
    compose_hash: str  # `config --hash`: what Compose compares to the container's label
    configs: dict[str, str] = field(default_factory=dict)  # config name -> sha256 of its content
    grace_s: float = 10.0  # stop_grace_period (Compose's default: 10 s)
    # Engines (label nearai.otel.role=engine) answer GET /health on their nearai.otel.port.
    health_port: int | None = None
    image: str | None = None
    start_period_s: float = 0.0  # the container healthcheck's start_period (0: none)
    model: str | None = None  # an engine's --served-model-name: what a chat completion asks for


@dataclass
class Compose:
    binary: Path
    file: Path
    project: str
    env_file: Path | None = None
    project_dir: Path | None = None  # relative paths resolve here (a git revision is materialized elsewhere)
    docker_host: str | None = None
    redact: Redactor = field(default_factory=Redactor)
    profiles: tuple[str, ...] = ()  # `--profile P` each; "*" enables every profile

    def _env(self) -> dict[str, str]:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/root")}
        for key in ("DOCKER_HOST", "DOCKER_CONFIG"):
            if os.environ.get(key):
                env[key] = os.environ[key]
        if self.docker_host:
            env["DOCKER_HOST"] = self.docker_host
        if self.env_file is None:
            # No host env map: no implicit `.env` either, every variable gets the placeholder.
            env["COMPOSE_DISABLE_ENV_FILE"] = "1"
            for name in sorted(set(_REQUIRED_VARIABLE.findall(self.file.read_text()))):
                env.setdefault(name, PLAN_PLACEHOLDER)
        return env

    def _argv(self, *args: str) -> list[str]:
        argv = [str(self.binary), "-p", self.project, "-f", str(self.file), "--project-directory", str(self.project_dir or self.file.parent)]
        if self.env_file is not None:
            argv += ["--env-file", str(self.env_file)]
        for profile in self.profiles:
            argv += ["--profile", profile]
        return argv + list(args)

    def run(self, *args: str, timeout_s: float = 120.0, check: bool = True) -> subprocess.CompletedProcess:
        try:
            proc = subprocess.run(self._argv(*args), env=self._env(), capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise ComposeError(f"docker-compose {' '.join(args)} ({self.file.name}) did not finish in {timeout_s:.0f} s") from None
        except OSError as err:
            raise ComposeError(f"cannot run the Compose binary {self.binary}: {err}") from None
        if check and proc.returncode != 0:
            raise ComposeError(f"docker-compose {' '.join(args)} ({self.file.name}) exited {proc.returncode}:\n"
                               + self.redact(proc.stderr.strip() or proc.stdout.strip()))
        return proc

    def model(self) -> dict[str, Any]:
        """Compose's canonical model (anchors merged, variables interpolated). Never print it."""
        return json.loads(self.run("config", "--format", "json").stdout)

    def hashes(self) -> dict[str, str]:
        out = {}
        for line in self.run("config", "--hash", "*").stdout.splitlines():
            name, _, digest = line.strip().partition(" ")
            if name:
                out[name] = digest
        return out

    def all_services(self) -> set[str]:
        """Every service of the file, profiled ones included (the plan sees only the default set)."""
        with_all = Compose(self.binary, self.file, self.project, self.env_file, self.project_dir, self.docker_host,
                           self.redact, ("*",))
        return set(with_all.run("config", "--services").stdout.split())

    def states(self) -> dict[str, ServiceState]:
        return service_states(self.model(), self.hashes(), self.project_dir or self.file.parent)

    def container_id(self, service: str) -> str | None:
        ids = self.run("ps", "--all", "--quiet", service).stdout.split()
        return ids[0] if ids else None

    def stop(self, service: str, grace_s: float) -> None:
        self.run("stop", "--timeout", str(max(0, round(grace_s))), service, timeout_s=grace_s + 60)

    def remove(self, service: str) -> None:
        self.run("rm", "--force", "--stop", service)

    def pull(self, service: str, timeout_s: float) -> None:
        """`pull --policy missing SERVICE`: an image pinned by digest that is present is not fetched again."""
        self.run("pull", "--policy", "missing", service, timeout_s=timeout_s)

    def run_check(self, service: str, env: Mapping[str, str], timeout_s: float) -> tuple[int, str]:
        """`run --rm --no-deps -e K=V SERVICE`: a one-off check container; (exit code, redacted output)."""
        args = ["run", "--rm", "--no-deps", "--quiet-pull"]
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        proc = self.run(*args, service, timeout_s=timeout_s, check=False)
        return proc.returncode, self.redact((proc.stdout + proc.stderr).strip())

    def up(self, service: str, wait_timeout_s: float, watch: Callable[[], str | None] = lambda: None,
           poll_s: float = 1.0) -> None:
        """`up --detach --no-deps --wait` of one service; `watch` is asked every poll_s while it
        waits and ends the wait early with the reason it returns (e.g. a crash loop)."""
        args = ("up", "--detach", "--no-deps", "--wait", "--wait-timeout", str(round(wait_timeout_s)), service)
        with tempfile.TemporaryFile("w+") as out:
            proc = subprocess.Popen(self._argv(*args), env=self._env(), stdout=out, stderr=subprocess.STDOUT, text=True)
            deadline = time.monotonic() + wait_timeout_s + 120
            reason = None
            while proc.poll() is None and reason is None:
                if time.monotonic() > deadline:
                    reason = f"docker-compose up did not return in {wait_timeout_s + 120:.0f} s"
                    break
                time.sleep(poll_s)
                reason = watch()
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            out.seek(0)
            output = self.redact(out.read().strip())
        if reason is not None:
            raise ComposeError(f"docker-compose {' '.join(args)} stopped waiting: {reason}")
        if proc.returncode != 0:
            raise ComposeError(f"docker-compose {' '.join(args)} ({self.file.name}) exited {proc.returncode}:\n{output}")


def config_content_sha256(name: str, config: Mapping[str, Any], project_dir: Path) -> str:
    """sha256 of what a config puts in the container (inline content, a file, or an env var)."""
    if "content" in config:
        data = str(config["content"]).encode()
    elif "file" in config:
        path = Path(config["file"])
        data = (path if path.is_absolute() else project_dir / path).read_bytes()
    elif "environment" in config:
        data = ("env:" + str(config["environment"])).encode()
    else:  # external or unknown kinds: only their declaration can be compared
        data = json.dumps(config, sort_keys=True).encode()
    return hashlib.sha256(data).hexdigest()


def service_states(model: Mapping[str, Any], hashes: Mapping[str, str], project_dir: Path = Path(".")) -> dict[str, ServiceState]:
    configs = model.get("configs") or {}
    states = {}
    for name, service in (model.get("services") or {}).items():
        mounted = {}
        for ref in service.get("configs") or []:
            source = ref["source"] if isinstance(ref, dict) else ref
            if source not in configs:
                raise ComposeError(f"services.{name}.configs: config {source!r} is not declared under top-level configs")
            mounted[source] = config_content_sha256(source, configs[source], project_dir)
        grace = service.get("stop_grace_period")
        labels = service.get("labels") or {}
        engine = labels.get("nearai.otel.role") == "engine"
        start_period = (service.get("healthcheck") or {}).get("start_period")
        argv = [str(a) for a in service.get("command") or []]
        served = argv[argv.index("--served-model-name") + 1] if "--served-model-name" in argv[:-1] else None
        states[name] = ServiceState(
            name=name,
            compose_hash=hashes.get(name, ""),
            configs=mounted,
            grace_s=go_duration_s(grace, f"services.{name}.stop_grace_period") if grace else 10.0,
            health_port=int(labels.get("nearai.otel.port", "8000")) if engine else None,
            image=service.get("image"),
            start_period_s=go_duration_s(start_period, f"services.{name}.healthcheck.start_period") if start_period else 0.0,
            model=(served or labels.get("nearai.otel.model")) if engine else None,
        )
    return states


def materialize(text: str, directory: Path, name: str) -> Path:
    """Writes a revision's text for Compose to read (a git revision has no file of its own)."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, raw = tempfile.mkstemp(prefix=name + ".", suffix=".yaml", dir=directory)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    return Path(raw)
