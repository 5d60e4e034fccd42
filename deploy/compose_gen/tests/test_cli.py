"""The command line: --out-dir (every file, for //compose:files), --print (one file)."""

from __future__ import annotations

from deploy.compose_gen import cli
from conftest import FIXTURE_RELEASES

RELEASES = [f"--release=glm53_v{n}={FIXTURE_RELEASES}/glm53_v{n}.json" for n in (1, 2, 3)]
LC = "GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml"


def test_out_dir_gets_every_file(tmp_path):
    assert cli.main(RELEASES + [f"--out-dir={tmp_path / 'out'}"]) == 0
    written = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert written == ["GLM-5.3-Flash-SGL-TP4-W4AFP8-LongContext.yaml",
                       "GLM-5.3-Flash-SGL-TP4-W4AFP8.yaml", "GLM-5.3-Flash-SGL-TP4.yaml"]


def test_print_one_file(capsys):
    assert cli.main(RELEASES + ["--print", LC]) == 0
    assert capsys.readouterr().out.startswith("# GLM-5.3 Flash")


def test_error_exit_code_and_message(capsys):
    assert cli.main(["--release=glm53_v1=/nonexistent.json", "--print", LC]) == 2
    assert "no release record for //recipes:glm53_v1" in capsys.readouterr().err
