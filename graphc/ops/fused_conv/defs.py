"""fused_relu_depthwise_conv2d and its gradient: depthwise_conv2d reading relu(Input).

Paddle marks such a depthwise_conv2d with ``fuse_relu_before_depthwise_conv``; graphc gives it
its own op type so that depthwise_conv2d keeps one meaning. The fuse-relu-depthwise-conv pass
creates them.
"""

from __future__ import annotations

from ...ir.grad_defs import default_grad_maker
from ...ir.opdef import get_op_def, register

_DW = get_op_def("depthwise_conv2d")
CONV_ATTRS = tuple(_DW.attrs)
_ATTRS = {name: (a.type, a.default) for name, a in _DW.attrs.items()}
_ATTRS["fuse_relu_before_depthwise_conv"] = ("bool", True)


def _grad(c):
    return {"Input@GRAD": c.x("Input"), "Filter@GRAD": c.x("Filter")}


register("fused_relu_depthwise_conv2d", "Input Filter", "Output", _ATTRS, infer=_DW.infer,
         doc="depthwise_conv2d(relu(Input)) when fuse_relu_before_depthwise_conv, "
             "else depthwise_conv2d(Input)")
register("fused_relu_depthwise_conv2d_grad", "Input Filter Output@GRAD",
         "Input@GRAD? Filter@GRAD?", _ATTRS, infer=_grad,
         doc="gradient of fused_relu_depthwise_conv2d: depthwise_conv2d_grad into relu_grad")
get_op_def("fused_relu_depthwise_conv2d").grad_maker = \
    default_grad_maker("fused_relu_depthwise_conv2d")
