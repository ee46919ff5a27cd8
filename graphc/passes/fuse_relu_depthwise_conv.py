"""fuse-relu-depthwise-conv: relu -> depthwise_conv2d becomes fused_relu_depthwise_conv2d reading
relu's input (``fuse_relu_before_depthwise_conv``), with its grad ops fused alike.

Matches, anchored at a depthwise_conv2d whose Input is a relu's output y:
  forward   y read only by the conv (and, in training graphs, by depthwise_conv2d_grad's Input
            and relu_grad's Out): relu and conv become one op reading relu's input x;
  backward  depthwise_conv2d_grad's Input@GRAD read only by relu_grad: both become
            fused_relu_depthwise_conv2d_grad(Input=x) with relu_grad's X@GRAD and the
            conv's Filter@GRAD. Paddle needs two runs (forward-only, then with the grads)
            because its forward pattern sees the grad readers of y; one local match does here.
The relu disappears, so y and its gradient are never stored. The fused rules apply the
unfused ops' own rules, so results are unchanged bit for bit.

Declines (stats ``skipped: ...``): y is fetched, a graph output or read by any other op (the
relu would stay, and run twice); y's gradient is fetched or read by another op; the grad ops
do not pair with the conv (another Filter or other attributes) or with each other.
Stats: ``fused``, ``fused grad``.
"""

from __future__ import annotations

from ..ir.grad_defs import GRAD_SUFFIX
from ..ir.graph import Graph
from ..ir.opdef import CONTROL_SLOT
from .infra.base import Pass, PassContext, register_pass
from .infra.driver import run_patterns
from .infra.guards import Check, OnlyReadBy
from .infra.pattern import Extension, Match, Node, Pattern
from .infra.rewrite import control_deps

_IN_GRAD = "Input" + GRAD_SUFFIX
_FILTER_GRAD = "Filter" + GRAD_SUFFIX
_OUT_GRAD = "Out" + GRAD_SUFFIX


def _fuse(m: Match, ctx: PassContext) -> None:
    rw = ctx.rewriter
    conv, relu, conv_grad, relu_grad = m.conv, m.relu, m.conv_grad, m.relu_grad
    attrs = {**conv.attrs, "use_cudnn": False, "fuse_relu_before_depthwise_conv": True}
    grad_ops = m.ops("conv_grad", "relu_grad")
    dropped = {m.y, m.y_grad}
    fwd_deps, grad_deps = control_deps([conv, relu], dropped), control_deps(grad_ops, dropped)
    grad_outs = {}
    if conv_grad is not None:
        grad_outs[_FILTER_GRAD] = conv_grad.output(_FILTER_GRAD)  # None: Filter is frozen
        grad_ins = {"Input": m.x, "Filter": conv_grad.input("Filter"),
                    "Output" + GRAD_SUFFIX: conv_grad.input("Output" + GRAD_SUFFIX),
                    CONTROL_SLOT: grad_deps}
    if relu_grad is not None:
        grad_outs[_IN_GRAD] = relu_grad.output("X" + GRAD_SUFFIX)
    grad_outs = {k: v for k, v in grad_outs.items() if v is not None}
    rw.erase_op(conv, erase_outputs=False)
    for g in grad_ops:
        rw.erase_op(g, erase_outputs=False)
    rw.erase_op(relu)  # and y, now unread
    if m.y_grad is not None:
        rw.erase_value(m.y_grad)
    rw.create_op("fused_relu_depthwise_conv2d", {"Input": m.x, "Filter": m.w,
                                                 CONTROL_SLOT: fwd_deps},
                 {"Output": m.output}, attrs, derived_from=[conv, relu])
    ctx.count("fused")
    if grad_outs:  # else the grad op computed only y's gradient, which nothing read
        rw.create_op("fused_relu_depthwise_conv2d_grad", grad_ins, grad_outs, attrs,
                     derived_from=grad_ops)
        ctx.count("fused grad")


def _conv_grad_pairs(m: Match, ctx) -> bool:
    g = m.conv_grad
    return g is None or (g.input("Filter") is m.w and g.attrs == m.conv.attrs)


def _relu_grad_pairs(m: Match, ctx) -> bool:
    return m.relu_grad is None or (m.y_grad is not None
                                   and m.relu_grad.input(_OUT_GRAD) is m.y_grad)


# forward: relu -> conv; two optional second roots, the grad ops reading relu's output y
FUSE = Pattern(
    "relu->depthwise_conv2d",
    (Node("conv", "depthwise_conv2d", ins={"Input": "y", "Filter": "w"},
          outs={"Output": "output"}),
     Node("relu", "relu", ins={"X": "x"}, outs={"Out": "y"})),
    (OnlyReadBy("y", (("conv", "Input"), ("conv_grad", "Input"), ("relu_grad", "Out")),
                "relu output"),
     Check(_conv_grad_pairs, "depthwise_conv2d_grad does not pair with the conv"),
     Check(_relu_grad_pairs, "relu_grad does not read depthwise_conv2d_grad's Input@GRAD"),
     OnlyReadBy("y_grad", (("relu_grad", _OUT_GRAD),), "relu output gradient")),
    _fuse,
    extensions=(
        Extension((Node("conv_grad", "depthwise_conv2d_grad", ins={"Input": "y"},
                        outs={_IN_GRAD + "?": "y_grad"}),)),
        Extension((Node("relu_grad", "relu_grad", ins={"Out": "y"}),)),
    ))


@register_pass
class FuseReluDepthwiseConv(Pass):
    """Fold relu into the depthwise_conv2d reading it (forward and backward)."""

    name = "fuse-relu-depthwise-conv"
    regions = "recurse"

    def run(self, graph: Graph, ctx: PassContext) -> None:
        run_patterns(graph, ctx, [FUSE])
