"""Lowering rules for fused_relu_depthwise_conv2d and its gradient (fuse-relu-depthwise-conv).

They apply relu's, depthwise_conv2d's and their gradients' own rules in the unfused order, so
the fused graph computes exactly what the unfused one did.
"""

from __future__ import annotations

from ...backends.lowering import lowering
from ...ir.grad_defs import GRAD_SUFFIX
from ..fused_bn.lowering import run_as, type_of
from .defs import CONV_ATTRS


@lowering("fused_relu_depthwise_conv2d")
def _fused_relu_depthwise_conv2d(c, Input, Filter):
    x = Input
    if c["fuse_relu_before_depthwise_conv"]:
        x = run_as(c, "relu", (), {"X": Input}, {"Out": type_of(Input)})["Out"]
    return run_as(c, "depthwise_conv2d", CONV_ATTRS, {"Input": x, "Filter": Filter},
                c.out_types)


@lowering("fused_relu_depthwise_conv2d_grad")
def _fused_relu_depthwise_conv2d_grad(c, **kw):
    x, relu = kw["Input"], c["fuse_relu_before_depthwise_conv"]
    y = run_as(c, "relu", (), {"X": x}, {"Out": type_of(x)})["Out"] if relu else x
    grads = run_as(c, "depthwise_conv2d_grad", CONV_ATTRS,
                 {"Input": y, "Filter": kw["Filter"],
                  "Output" + GRAD_SUFFIX: kw["Output" + GRAD_SUFFIX]}, c.out_types)
    dy = grads.get("Input" + GRAD_SUFFIX)
    if relu and dy is not None:
        grads["Input" + GRAD_SUFFIX] = run_as(
            c, "relu_grad", (), {"Out": y, "Out" + GRAD_SUFFIX: dy},
            {"X" + GRAD_SUFFIX: type_of(x)})["X" + GRAD_SUFFIX]
    return grads
