"""W4AFp8Config.from_config keeps the checkpoint's list of unquantized modules."""

from __future__ import annotations

import pytest

from sglang.srt.layers.linear import LinearBase
from sglang.srt.layers.quantization.fp8 import Fp8LinearMethod
from sglang.srt.layers.quantization.unquant import UnquantizedLinearMethod
from sglang.srt.layers.quantization.w4afp8 import W4AFp8Config

EXCLUDED = ["model.layers.0.self_attn", "lm_head"]


def _config(**extra: object) -> W4AFp8Config:
    return W4AFp8Config.from_config({"quant_method": "w4afp8", **extra})


@pytest.mark.detects_stock_bug
@pytest.mark.parametrize("key", ["modules_to_not_convert", "ignored_layers", "ignore"])
def test_each_key_becomes_ignored_layers(key: str) -> None:
    assert _config(**{key: EXCLUDED}).ignored_layers == EXCLUDED


@pytest.mark.detects_stock_bug
def test_modules_to_not_convert_wins_over_the_fallbacks() -> None:
    config = _config(modules_to_not_convert=["a"], ignored_layers=["b"], ignore=["c"])
    assert config.ignored_layers == ["a"]


@pytest.mark.detects_stock_bug
def test_ignored_layers_wins_over_ignore() -> None:
    assert _config(ignored_layers=["b"], ignore=["c"]).ignored_layers == ["b"]


@pytest.mark.detects_stock_bug
def test_null_key_falls_back_to_the_next_one() -> None:
    config = _config(modules_to_not_convert=None, ignore=["c"])
    assert config.ignored_layers == ["c"]


def test_default_is_empty() -> None:
    assert _config().ignored_layers == []


@pytest.mark.detects_stock_bug
def test_list_is_copied_not_shared() -> None:
    # The checkpoint dict may be reused by the caller; mutating it later must not
    # change the built config.
    excluded = list(EXCLUDED)
    config = _config(modules_to_not_convert=excluded)
    excluded.append("model.layers.1")
    assert config.ignored_layers == EXCLUDED


@pytest.mark.detects_stock_bug
def test_excluded_linear_layer_gets_the_unquantized_method() -> None:
    config = _config(modules_to_not_convert=EXCLUDED)
    # get_quant_method only checks isinstance; no weights are built.
    layer = object.__new__(LinearBase)
    method = config.get_quant_method(layer, "model.layers.0.self_attn.q_proj")
    assert isinstance(method, UnquantizedLinearMethod)
    method = config.get_quant_method(layer, "model.layers.1.self_attn.q_proj")
    assert isinstance(method, Fp8LinearMethod)
