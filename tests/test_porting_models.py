"""Blockers met porting PaddlePaddle/models 1.8 programs: Paddle's fluid.layers submodules,
LoD through expand/cos_sim/sequence_unpad, rank-1 labels in cross_entropy, numeric-string feeds."""

from __future__ import annotations

import importlib

import pytest

import graphc.fluid as fluid
from graphc.fluid import MissingAPIError, MissingModuleError
from graphc.fluid.layer_modules import PADDLE_LAYER_MODULES

# (module, a name Paddle 1.8 keeps there) as ported model code spells them
_SPELLINGS = [
    ("nn", "cos_sim"), ("nn", "reduce_sum"), ("nn", "elementwise_mul"), ("nn", "mean"),
    ("tensor", "cast"), ("tensor", "fill_constant"), ("tensor", "concat"),
    ("control_flow", "less_than"), ("control_flow", "equal"), ("io", "data"),
    ("ops", "sigmoid"), ("loss", "cross_entropy"), ("detection", "box_coder"),
    ("metric_op", "auc"), ("learning_rate_scheduler", "noam_decay"),
    ("sequence_lod", "sequence_pool"), ("math_op_patch", "monkey_patch_variable"),
    ("utils", "flatten"), ("rnn", "dynamic_gru"),
]


@pytest.mark.parametrize("module,name", _SPELLINGS)
def test_layer_submodule_import_and_attribute(module, name):
    imported = importlib.import_module(f"graphc.fluid.layers.{module}")
    assert getattr(fluid.layers, module) is imported
    # utils/math_op_patch keep their own helpers (utils.flatten is not the flatten layer)
    own = PADDLE_LAYER_MODULES[module][1] == "own"
    expected = imported.__dict__[name] if own else getattr(fluid.layers, name)
    assert getattr(imported, name) is expected
    scope: dict = {}
    exec(f"from graphc.fluid.layers.{module} import {name} as found", scope)
    assert scope["found"] is expected


def test_every_listed_name_resolves_or_advises():
    for module, (names, _) in PADDLE_LAYER_MODULES.items():
        mod = getattr(fluid.layers, module)
        for name in names:
            try:
                getattr(mod, name)
            except MissingAPIError as exc:  # graphc lacks it: the error says so
                assert name in str(exc)


def test_missing_name_advice_survives_from_import():
    with pytest.raises(MissingAPIError, match="StaticRNN"):
        fluid.layers.control_flow.StaticRNN  # noqa: B018
    with pytest.raises(MissingModuleError, match="control flow") as info:
        exec("from graphc.fluid.layers.control_flow import StaticRNN", {})
    assert isinstance(info.value, ImportError)


def test_name_outside_paddles_module_is_refused():
    # Paddle 1.8 keeps cross_entropy in loss.py, not nn.py
    with pytest.raises(MissingAPIError, match="graphc.fluid.layers.sequence_lod"):
        fluid.layers.sequence_lod.cross_entropy  # noqa: B018
    with pytest.raises(AttributeError):
        fluid.layers.nn.no_such_layer  # noqa: B018
