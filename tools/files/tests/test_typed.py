"""tools.files.typed: one wording for the shared checks, raised as the caller's own error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.files import typed


class Bad(Exception):
    pass


def error(message: str) -> Bad:
    return Bad(f"f.toml: [row]: {message}")


def test_exact_keys_names_unknown_missing_and_the_keys():
    with pytest.raises(Bad) as e:
        typed.check_keys({"pin": 1, "image": 2}, error, ("pin", "port"), ("environment",))
    assert str(e.value) == ("f.toml: [row]: unknown keys ['image'], missing keys ['port']; "
                            "the keys are pin, port (optional: environment)")
    typed.check_keys({"pin": 1, "port": 2}, error, ("pin", "port"), ("environment",))


@pytest.mark.parametrize("check, value, message", [
    (lambda v: typed.string({"name": v}, "name", error), 3, "name must be a string, got 3"),
    (lambda v: typed.string({"sha": v}, "sha", error, typed.SHA256_RE, " (64 hex)"), "ab",
     "sha = 'ab' does not match ^[0-9a-f]{64}$ (64 hex)"),
    (lambda v: typed.integer({"port": v}, "port", error), True,
     "port must be an integer >= 1, got True"),
    (lambda v: typed.boolean({"hicache": v}, "hicache", error), "yes",
     "hicache must be true or false, got 'yes'"),
    (lambda v: typed.string_list({"markers": v}, "markers", error), ["a", 1],
     "markers must be a list of strings"),
    (lambda v: typed.mapping(v, "[engine]", error), [], "[engine] must be a table, got list"),
])
def test_type_checks_raise_the_callers_error(check, value, message):
    with pytest.raises(Bad) as e:
        check(value)
    assert str(e.value).startswith("f.toml: [row]: " + message)


def test_loaders_name_the_problem(tmp_path: Path):
    (tmp_path / "bad.toml").write_text("a = \n")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(Bad, match="not valid TOML"):
        typed.load_toml(tmp_path / "bad.toml", error)
    with pytest.raises(Bad, match="file not found"):
        typed.load_toml(tmp_path / "none.toml", error)
    with pytest.raises(Bad, match=r"not valid JSON"):
        typed.load_json(tmp_path / "bad.json", error)
    with pytest.raises(Bad, match="missing; create it"):
        typed.load_json(tmp_path / "none.json", error, "create it")
    (tmp_path / "ok.toml").write_text("a = 1\n")
    assert typed.load_toml(tmp_path / "ok.toml", error) == {"a": 1}
