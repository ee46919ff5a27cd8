"""Weight normalisation as Paddle 1.8's LayerHelper builds it for a WeightNormParamAttr:
parameters ``<name>_g`` and ``<name>_v``, g initialised to ||v||, w = v * g / ||v||."""

from __future__ import annotations

import copy

from ..ir import unique_name
from ..ir.errors import ProgramError


def _norm_except_dim(block, v: str, shape: list, dim, dtype: str, out: str | None,
                     prefix: str) -> str:
    """||v|| over every axis but ``dim`` (all with None), size-1 axes kept: g's shape."""
    def tmp(what):
        return block.create_var(unique_name.generate(f"{prefix}.weight_norm_{what}"), None,
                                dtype).name
    sq = tmp("square")
    block.append_op("square", {"X": v}, {"Out": sq})
    axes = [a for a in range(len(shape)) if a != dim]
    summed = tmp("sum")
    block.append_op("reduce_sum", {"X": sq}, {"Out": summed},
                    {"dim": axes or [0], "keep_dim": True, "reduce_all": dim is None})
    out = out or tmp("norm")
    block.append_op("sqrt", {"X": summed}, {"Out": out})
    return out


def weight_normalized(helper, attr, name: str, shape: list, dtype: str, init):
    """The weight ``w`` (a temporary of the main program) for WeightNormParamAttr ``attr``;
    creates and initialises ``<name>_g`` and ``<name>_v`` through ``helper``."""
    dim = attr.dim
    if dim is not None:
        if not -len(shape) <= dim < len(shape):
            raise ProgramError(f"{helper.layer_type}: WeightNormParamAttr dim {dim} is out of "
                               f"range for the weight of shape {shape}")
        dim %= len(shape)
    g_shape = [1] * len(shape)
    if dim is not None:
        g_shape[dim] = shape[dim]
    v_attr, g_attr = copy.copy(attr), copy.copy(attr)
    v_attr.name, g_attr.name = f"{name}_v", f"{name}_g"
    startup = helper.startup_program.global_block()
    g_new = g_attr.name not in startup.vars
    v = helper._parameter(v_attr, v_attr.name, shape, dtype, init)
    # g's startup value is ||v|| of v's initial value (computed there, after v's initializer)
    g = helper.main_program.global_block().create_parameter(
        g_attr.name, g_shape, dtype, trainable=g_attr.trainable,
        learning_rate=g_attr.learning_rate, regularizer=g_attr.regularizer, initializer=None,
        need_clip=g_attr.need_clip)
    g_attr._set_on(g)
    if g_new:
        startup.create_var(g_attr.name, g_shape, dtype, persistable=True)
        _norm_except_dim(startup, v.name, shape, dim, dtype, g_attr.name, helper.name)
    block = helper.block
    norm = _norm_except_dim(block, v.name, shape, dim, dtype, None, helper.name)
    scale = helper.create_variable_for_type_inference(dtype)
    block.append_op("elementwise_div", {"X": g, "Y": norm}, {"Out": scale}, {"axis": -1})
    w = helper.create_variable_for_type_inference(dtype)
    block.append_op("elementwise_mul", {"X": v, "Y": scale}, {"Out": w}, {"axis": -1})
    return w
