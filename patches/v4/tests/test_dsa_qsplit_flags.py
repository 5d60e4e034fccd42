"""SGLANG_DSA_INDEXER_QSPLIT flags: parsing, module reload and the group gate (0.5.23).

0.5.23 reaches the attention-TP group through get_parallel().attn_tp_group.
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType, SimpleNamespace
from typing import Callable, Iterator

import pytest

import sglang.srt.layers.attention.dsa.dsa_indexer as dsa_indexer

FLAG = "SGLANG_DSA_INDEXER_QSPLIT"
MIN_ROWS = "SGLANG_DSA_INDEXER_QSPLIT_MIN_ROWS"

pytestmark = pytest.mark.detects_stock_bug  # stock 0.5.23 has no query split


class _Group:
    def __init__(self, world_size: int) -> None:
        self.world_size = world_size


def _no_group():
    raise AssertionError("the attention-TP group must not be consulted here")


def _parallel(group: _Group):
    return lambda: SimpleNamespace(attn_tp_group=group)


Reload = Callable[..., ModuleType]


@pytest.fixture
def reload_indexer(monkeypatch: pytest.MonkeyPatch) -> Iterator[Reload]:
    """Reload dsa_indexer under a given environment; restore it afterwards."""

    def _reload(**env: str) -> ModuleType:
        monkeypatch.delenv(FLAG, raising=False)
        monkeypatch.delenv(MIN_ROWS, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        return importlib.reload(dsa_indexer)

    yield _reload
    monkeypatch.undo()
    importlib.reload(dsa_indexer)


def test_off_by_default(
    reload_indexer: Reload, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = reload_indexer()
    assert module._QSPLIT is False
    assert module._QSPLIT_MIN_ROWS == 1024
    monkeypatch.setattr(module, "get_parallel", _no_group)
    assert module._qsplit_group(1_000_000) is None


@pytest.mark.parametrize("value", ["1", "true", "TRUE"])
def test_enabled_after_reload(
    reload_indexer: Reload, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    module = reload_indexer(**{FLAG: value, MIN_ROWS: "2048"})
    assert module._QSPLIT is True
    assert module._QSPLIT_MIN_ROWS == 2048
    monkeypatch.setattr(module, "get_parallel", _no_group)
    assert module._qsplit_group(2047) is None


@pytest.mark.parametrize("value", ["0", "false", ""])
def test_disabled_values(reload_indexer: Reload, value: str) -> None:
    assert reload_indexer(**{FLAG: value})._QSPLIT is False


def test_reload_back_to_default_turns_it_off(reload_indexer: Reload) -> None:
    assert reload_indexer(**{FLAG: "1"})._QSPLIT is True
    assert reload_indexer()._QSPLIT is False


@pytest.mark.parametrize("world_size, expected", [(1, False), (2, True), (8, True)])
def test_group_needs_more_than_one_rank(
    reload_indexer: Reload,
    monkeypatch: pytest.MonkeyPatch,
    world_size: int,
    expected: bool,
) -> None:
    module = reload_indexer(**{FLAG: "1", MIN_ROWS: "2048"})
    group = _Group(world_size)
    monkeypatch.setattr(module, "get_parallel", _parallel(group))
    assert (module._qsplit_group(2048) is group) is expected


@pytest.mark.parametrize("value", ["abc", "0", "-5", "1.5"])
def test_bad_min_rows_with_the_split_on_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(FLAG, "1")
    monkeypatch.setenv(MIN_ROWS, value)
    with pytest.raises(ValueError, match=MIN_ROWS):
        dsa_indexer._read_qsplit_env()


@pytest.mark.parametrize("value", ["abc", "0", "-5", "1.5"])
def test_bad_min_rows_with_the_split_off_still_imports(
    reload_indexer: Reload, caplog: pytest.LogCaptureFixture, value: str
) -> None:
    # The setting is unused while the split is off: the module must load
    # (a real reload, as at model load) and say once what it ignored.
    with caplog.at_level(logging.WARNING, logger=dsa_indexer.__name__):
        module = reload_indexer(**{MIN_ROWS: value})
    assert module._QSPLIT is False
    assert module._QSPLIT_MIN_ROWS == 1024
    warnings = [r.getMessage() for r in caplog.records if MIN_ROWS in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert f"{MIN_ROWS}={value!r}" in warnings[0]
    assert "ignored while SGLANG_DSA_INDEXER_QSPLIT is off" in warnings[0]
