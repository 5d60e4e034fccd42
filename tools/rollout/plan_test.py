"""The rollout planner on the committed long-context compose file and real generator output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from generators.compose_gen.cli import main as generate_main

LONG = "GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"
R1, R2 = "model-sg-glm53-w4afp8-tp4-r1", "model-sg-glm53-w4afp8-tp4-r2"
RUNFILES = Path(__file__).resolve().parent.parent.parent


def _generate_with_r2_on(release: str, capsys) -> str:
    """The long-context file as the generator makes it with r2 on another image release."""
    tables = RUNFILES / "generators" / "tables"
    lines = (tables / "glm53_tp4_w4afp8_long_context.toml").read_text().splitlines(keepends=True)
    release_lines = [i for i, line in enumerate(lines) if line.startswith("release = ")]
    assert len(release_lines) == 2, "expected one release line per replica (r1, r2)"
    lines[release_lines[1]] = f'release = "{release}"\n'
    tmp_table = Path(os.environ["TEST_TMPDIR"]) / "long_context_r2.toml"
    tmp_table.write_text("".join(lines))
    records = [f"glm53_v{n}={RUNFILES / 'recipes' / 'releases' / f'glm53_v{n}.json'}" for n in (1, 2, 3)]
    argv = [a for r in records for a in ("--release", r)]
    assert generate_main(argv + ["--common", str(tables / "common.toml"), "--deployment", str(tmp_table), "--print", LONG]) == 0
    return capsys.readouterr().out


@pytest.fixture
def repo(tmp_path: Path, capsys) -> Path:
    """A git repo whose HEAD~ holds the canary with r2 still on v2 and whose tree holds the target."""
    (tmp_path / "compose").mkdir()
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "compose" / LONG).write_text(_generate_with_r2_on("glm53_v2", capsys))
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "deployed"], check=True)
    (tmp_path / "compose" / LONG).write_text((RUNFILES / "compose" / LONG).read_text())
    return tmp_path


def _plan(repo: Path, *services: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "BUILD_WORKSPACE_DIRECTORY": str(repo), "BUILD_WORKING_DIRECTORY": str(repo)}
    return subprocess.run(
        [sys.executable, "-m", "tools.rollout.plan", "plan", "--from", f"compose/{LONG}@HEAD", "--to", f"compose/{LONG}",
         "--services", *services, "--tag", "v0.0.42"],
        capture_output=True, text=True, env=env, cwd=RUNFILES,
    )


def test_moving_r2_from_v2_to_v3_plans_exactly_r2(repo: Path) -> None:
    proc = _plan(repo, R2)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [l for l in lines if l.startswith("  ")][0].startswith(f"  recreate  {R2}: image")
    assert not any(R1 in l or "proxy-glm53" in l for l in lines if l.startswith("  "))
    calls = json.loads(proc.stdout[proc.stdout.index("{"):])
    deploy = calls["deploy"]
    assert [c["call"] for c in deploy] == ["compose/down", "compose/up", "compose/up"]
    assert deploy[0] == {"call": "compose/down", "file": f"compose/{LONG}", "tag": "HEAD", "services": [R2], "env": deploy[0]["env"]}
    assert [c["dry_run"] for c in deploy[1:]] == [True, False]
    assert all(c["force_recreate"] is False and c["services"] == [R2] and c["tag"] == "v0.0.42" for c in deploy[1:])
    assert [c["call"] for c in calls["rollback"]] == ["compose/down", "compose/up", "compose/up"]
    assert calls["rollback"][1]["tag"] == "HEAD"


def test_plan_that_also_recreates_the_proxy_is_refused(repo: Path) -> None:
    target = repo / "compose" / LONG
    head, sep, proxy = target.read_text().partition("\n  proxy-glm53:\n")
    assert sep, "proxy-glm53 service not found"
    image_line = next(l for l in proxy.splitlines() if l.startswith("    image: "))
    assert "@" in image_line
    bumped = image_line + "0"  # another pin of the proxy image
    target.write_text(head + sep + proxy.replace(image_line, bumped, 1))
    proc = _plan(repo, R2)
    assert proc.returncode == 1
    assert "REFUSED: the plan also touches services not named with --services: proxy-glm53 (image)" in proc.stderr


def test_plan_that_orphans_a_service_is_refused(repo: Path) -> None:
    target = repo / "compose" / LONG
    lines = target.read_text().splitlines(keepends=True)
    start = lines.index("  glm53-soak-relay:\n")
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("  ") and not lines[i].startswith("   "))
    target.write_text("".join(lines[:start] + lines[end:]))
    proc = _plan(repo, R2)
    assert proc.returncode == 1
    assert "REFUSED: the target file would remove (orphan) glm53-soak-relay; nothing may be removed" in proc.stderr


def test_naming_an_unchanged_service_is_refused(repo: Path) -> None:
    proc = _plan(repo, R2, R1)
    assert proc.returncode == 1
    assert f"REFUSED: named services the plan would not change: {R1}" in proc.stderr


def test_deployed_revision_is_required(repo: Path) -> None:
    env = {**os.environ, "BUILD_WORKSPACE_DIRECTORY": str(repo)}
    proc = subprocess.run([sys.executable, "-m", "tools.rollout.plan", "plan", "--from", f"compose/{LONG}", "--to", f"compose/{LONG}",
                           "--services", R2], capture_output=True, text=True, env=env, cwd=RUNFILES)
    assert proc.returncode == 2
    assert "give the deployed revision as PATH@GIT_REV" in proc.stderr
