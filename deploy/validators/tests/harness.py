"""Mutation-test helpers: copy a compose file, apply one drift, run the real validator CLI."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ruamel.yaml import YAML

from deploy.validators import check
from deploy.validators.compose_doc import load_compose, load_yaml_text
from deploy.validators.topology import engines

HERE = Path(__file__).resolve().parent
# Plain `pytest deploy/validators/tests` (outside Bazel) checks the committed files and records.
REPO = HERE.parents[2]


@dataclass(frozen=True)
class Inputs:
    long_context: Path  # the W4AFP8 long-context file (all validators)
    source: Path  # the file the long-context file derives from (whole-file rule)
    all_files: tuple[Path, ...]  # every compose file the generic validators must accept
    releases: tuple[Path, ...]  # release records (split capability)
    compose_bin: str
    nginx_bin: str


def inputs_from_env() -> Inputs:
    lc = _path_from_env("LONG_CONTEXT_COMPOSE", REPO / "compose" / "GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml")
    source = _path_from_env("LONG_CONTEXT_SOURCE", REPO / "compose" / "GLM-5.3-Flash-SGL-TP4-W4AFP8.yaml")
    extra = [Path(p).absolute() for p in os.environ.get("OTHER_COMPOSE", "").split() if p]
    releases = os.environ.get("RELEASE_RECORDS", "").split()
    release_paths = tuple(Path(p).absolute() for p in releases) or tuple(
        sorted((REPO / "recipes" / "releases").glob("*.json")))
    return Inputs(lc, source, tuple(dict.fromkeys([lc, source, *extra])), release_paths,
                  os.environ.get("COMPOSE_BIN", ""), os.environ.get("NGINX_BIN", "/usr/sbin/nginx"))


@dataclass(frozen=True)
class Result:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def errors(self) -> list[str]:
        """The finding lines, without the `  - ` bullet."""
        return [l[4:] for l in self.stderr.splitlines() if l.startswith("  - ")]


def _cli_env() -> dict[str, str]:
    """The environment a validator CLI runs with here: nothing of the test's own."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
            # The validators read Compose's canonical model through the pinned binary.
            "COMPOSE_BIN": os.environ.get("COMPOSE_BIN", "")}


def run_validator(module: str, *args: str | Path) -> Result:
    """The real CLI in a child interpreter: exit code, output, and no traceback allowed."""
    proc = subprocess.run([sys.executable, "-m", f"validators.{module}", *map(str, args)],
                          capture_output=True, text=True, env=_cli_env(), timeout=300)
    assert "Traceback" not in proc.stderr, proc.stderr
    return Result(proc.returncode, proc.stdout, proc.stderr)


def run_in_process(main: Callable[[list[str]], int], *args: str | Path) -> Result:
    """A validator's `main(argv)` in this process, as `run_validator`'s child runs it: the same
    environment (swapped in for the call), stdout and stderr captured apart, the exit code from
    the return value or SystemExit, and no traceback (an exception fails the test itself).

    For the mutation suites, which run `check` once per case: a child interpreter paid ~0.4 s
    of start-up and imports per case, and re-resolved the committed files a case leaves
    unchanged; here the session's `shared_reads()` (conftest.py) keeps those. Validators keep no
    other state between runs (no module globals but that scope and `nginx -v`'s answer)."""
    out, err = io.StringIO(), io.StringIO()
    saved, env = dict(os.environ), _cli_env()
    os.environ.clear()
    os.environ.update(env)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert "Traceback" not in err.getvalue(), err.getvalue()
    return Result(code, out.getvalue(), err.getvalue())


def load(path: Path) -> dict[str, Any]:
    """The validators' own parse (compose_doc.load_yaml_text): inside the session's
    `shared_reads()` (conftest.py) each committed file is parsed once per test process, not once
    per case, and each mutant once however often a case's expectations read it."""
    return load_yaml_text(path.read_text(), str(path))


def dump(doc: dict[str, Any], path: Path) -> None:
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.width = 4096
    with path.open("w") as handle:
        yaml.dump(doc, handle)


def _path_from_env(var: str, default: Path) -> Path:
    """Bazel passes rootpaths of the committed files; plain pytest falls back to the same file in the checkout."""
    value = os.environ.get(var)
    return Path(value).absolute() if value else default


Mutation = Callable[[dict[str, Any]], None]


def mutator(tmp_path: Path) -> Callable[[Path, Mutation], Path]:
    """Copies `source` (loaded, merge keys resolved) with one drift applied; returns the copy."""
    counter = iter(range(1000))

    def apply(source: Path, mutation: Mutation) -> Path:
        # A JSON round trip unshares aliased nodes: drifting r1's environment must not also
        # drift the anchor it was merged from.
        doc = json.loads(json.dumps(load(source)))
        mutation(doc)
        target = tmp_path / f"mutant{next(counter)}-{source.name}"
        dump(doc, target)
        return target

    return apply


def replace_once(text: str, old: str, new: str, count: int = 1) -> str:
    """Exact-count text surgery: a mutation that silently misses would prove nothing."""
    found = text.count(old)
    assert found == count, f"expected {count} occurrence(s) of {old!r}, found {found}"
    return text.replace(old, new)


# --- the one entry point (validators.check) -------------------------------------------------


@dataclass(frozen=True)
class CheckInputs:
    compose_files: tuple[Path, ...]  # every committed compose file (by glob in //compose)
    compose_dir: Path
    releases_dir: Path
    series_dir: Path
    compose_bin: str
    nginx_bin: str


def check_inputs_from_env() -> CheckInputs:
    files = tuple(Path(p).absolute() for p in os.environ.get("COMPOSE_FILES", "").split()) or \
        tuple(sorted((REPO / "compose").glob("*.yaml")))
    records = [Path(p).absolute() for p in os.environ.get("RELEASE_RECORDS", "").split()]
    series = [Path(p).absolute() for p in os.environ.get("SERIES_FILES", "").split()]
    return CheckInputs(
        files, files[0].parent,
        records[0].parent if records else REPO / "recipes" / "releases",
        series[0].parent.parent if series else REPO / "patches",
        os.environ.get("COMPOSE_BIN", ""), os.environ.get("NGINX_BIN", "/usr/sbin/nginx"))


@dataclass(frozen=True)
class CheckResult(Result):
    def by_validator(self) -> dict[str, list[str]]:
        """Finding lines grouped under the validator whose report printed them."""
        out: dict[str, list[str]] = {}
        current = ""
        for line in self.stderr.splitlines():
            if line.endswith(" error(s)") and " failed: " in line:
                current = line.split(" failed: ")[0]
                out.setdefault(current, [])
            elif line.startswith("  - "):
                out.setdefault(current, []).append(line[4:])
        return out


def _check_args(ci: CheckInputs, files: tuple[str | Path, ...],
                extra: tuple[str, ...]) -> list[str | Path]:
    return ["--compose-bin", ci.compose_bin, "--nginx-bin", ci.nginx_bin,
            "--releases-dir", ci.releases_dir, "--series-dir", ci.series_dir,
            "--compose-dir", ci.compose_dir, *extra, *files]


def run_check(ci: CheckInputs, *files: str | Path, extra: tuple[str, ...] = ()) -> CheckResult:
    """`check` in this process (run_in_process); test_check.py runs the CLI itself."""
    result = run_in_process(check.main, *_check_args(ci, files, extra))
    return CheckResult(result.returncode, result.stdout, result.stderr)


def run_check_cli(ci: CheckInputs, *files: str | Path,
                  extra: tuple[str, ...] = ()) -> CheckResult:
    """`python -m validators.check` in a child interpreter (run_validator)."""
    result = run_validator("check", *_check_args(ci, files, extra))
    return CheckResult(result.returncode, result.stdout, result.stderr)


def text_mutator(tmp_path: Path) -> Callable[..., Path]:
    """Copies `source` as text with `edit` applied (anchors and merge keys stay as written)."""
    counter = iter(range(1000))

    def apply(source: Path, edit: Callable[[str], str], name: str | None = None) -> Path:
        target = tmp_path / (name or f"mutant{next(counter)}-{source.name}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(edit(source.read_text()))
        return target

    return apply


# --- generator-level edits: the same edit in every committed file ----------------------------

Edit = Callable[[str, Path], str]


def generator_edit(ci: CheckInputs, tmp_path: Path, edit: Edit) -> list[Path]:
    """Every committed file with the same edit, under its own name (so the long-context file
    finds the equally edited file it derives from)."""
    out = []
    for path in ci.compose_files:
        target = tmp_path / "edited" / path.name
        target.parent.mkdir(exist_ok=True)
        target.write_text(edit(path.read_text(), path))
        out.append(target)
    return out


def generator_mutation(ci: CheckInputs, tmp_path: Path,
                       mutation: Callable[[dict[str, Any], Path], None]) -> list[Path]:
    """Every committed file, loaded (merge keys resolved, aliases unshared) with the same
    mutation, under its own name: what a generator change writes into every file."""
    out = []
    for path in ci.compose_files:
        doc = json.loads(json.dumps(load(path)))
        mutation(doc, path)
        target = tmp_path / "edited" / path.name
        target.parent.mkdir(exist_ok=True)
        dump(doc, target)
        out.append(target)
    return out


def engine_names(path: Path) -> list[str]:
    return sorted(engines(load_compose(path)))


def assert_generator_edit_caught(ci: CheckInputs, files: list[Path],
                                 expected: Callable[[Path], list[str]],
                                 contract_sees: bool = False) -> CheckResult:
    """The runtime validator reports exactly `expected` for every edited file. Unless the
    production contract states the edited value itself (`contract_sees`), it must not see the
    edit: its whole-file rule compares two outputs of the same generator."""
    result = run_check(ci, *files)
    assert result.returncode == 1, result.output
    found = result.by_validator()
    if not contract_sees:
        assert "glm53-prod-contract" not in found, found["glm53-prod-contract"]
    assert found["runtime"] == [line for path in files for line in expected(path)]
    return result


