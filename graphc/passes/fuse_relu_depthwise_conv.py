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
from ..ir.graph import Graph, Op
from ..ir.opdef import CONTROL_SLOT
from .fuse_bn_act import control_deps
from .infra.base import Pass, PassContext, register_pass, single_user, user_count_reason

_IN_GRAD = "Input" + GRAD_SUFFIX
_FILTER_GRAD = "Filter" + GRAD_SUFFIX


def _only_read_by(graph: Graph, value, op: Op | None, keep: set) -> bool:
    """Whether ``op`` alone reads ``value`` (nothing at all when ``op`` is None)."""
    if op is not None:
        return single_user(graph, value, keep)
    return not graph._succ[value] and value not in keep and not graph.is_output(value)


@register_pass
class FuseReluDepthwiseConv(Pass):
    """Fold relu into the depthwise_conv2d reading it (forward and backward)."""

    name = "fuse-relu-depthwise-conv"

    def run(self, graph: Graph, ctx: PassContext) -> None:
        for op in list(graph.ops()):
            if op.type == "depthwise_conv2d" and op.id in graph.ops_by_id:
                self._fuse(graph, ctx, op)

    def _fuse(self, graph: Graph, ctx: PassContext, conv: Op) -> None:
        y = conv.input("Input")
        relu = y.producer
        if relu is None or relu.type != "relu":
            return  # not a candidate
        if y in ctx.keep or graph.is_output(y):
            ctx.decline("relu output " + user_count_reason(graph, y, ctx.keep)
                        .removeprefix("intermediate "))
            return
        users = graph.users(y)
        conv_grads = [u for u, s, _ in users if u.type == "depthwise_conv2d_grad" and s == "Input"]
        relu_grads = [u for u, s, _ in users if u.type == "relu_grad" and s == "Out"]
        if len(users) != 1 + len(conv_grads) + len(relu_grads) \
                or len(conv_grads) > 1 or len(relu_grads) > 1:
            ctx.decline(f"relu output has {len(users)} users")
            return
        conv_grad = conv_grads[0] if conv_grads else None
        relu_grad = relu_grads[0] if relu_grads else None
        if conv_grad is not None and (conv_grad.input("Filter") is not conv.input("Filter")
                                      or conv_grad.attrs != conv.attrs):
            ctx.decline("depthwise_conv2d_grad does not pair with the conv")
            return
        y_grad = conv_grad.output(_IN_GRAD) if conv_grad is not None else None
        if relu_grad is not None and (y_grad is None
                                      or relu_grad.input("Out" + GRAD_SUFFIX) is not y_grad):
            ctx.decline("relu_grad does not read depthwise_conv2d_grad's Input@GRAD")
            return
        if y_grad is not None and not _only_read_by(graph, y_grad, relu_grad, ctx.keep):
            ctx.decline("relu output gradient " + user_count_reason(graph, y_grad, ctx.keep)
                        .removeprefix("intermediate "))
            return

        rw = ctx.rewriter
        x, w = relu.input("X"), conv.input("Filter")
        attrs = {**conv.attrs, "use_cudnn": False, "fuse_relu_before_depthwise_conv": True}
        grad_ops = [g for g in (conv_grad, relu_grad) if g is not None]
        dropped = {y, y_grad}
        fwd_deps, grad_deps = control_deps([conv, relu], dropped), control_deps(grad_ops, dropped)
        grad_outs = {}
        if conv_grad is not None:
            grad_outs[_FILTER_GRAD] = conv_grad.output(_FILTER_GRAD)  # None: Filter is frozen
            grad_ins = {"Input": x, "Filter": conv_grad.input("Filter"),
                        "Output" + GRAD_SUFFIX: conv_grad.input("Output" + GRAD_SUFFIX),
                        CONTROL_SLOT: grad_deps}
        if relu_grad is not None:
            grad_outs[_IN_GRAD] = relu_grad.output("X" + GRAD_SUFFIX)
        grad_outs = {k: v for k, v in grad_outs.items() if v is not None}
        output = conv.output("Output")
        rw.erase_op(conv, erase_outputs=False)
        for g in grad_ops:
            rw.erase_op(g, erase_outputs=False)
        rw.erase_op(relu)  # and y, now unread
        if y_grad is not None:
            rw.erase_value(y_grad)
        rw.create_op("fused_relu_depthwise_conv2d", {"Input": x, "Filter": w,
                                                     CONTROL_SLOT: fwd_deps},
                     {"Output": output}, attrs, derived_from=[conv, relu])
        ctx.count("fused")
        if grad_outs:  # else the grad op computed only y's gradient, which nothing read
            rw.create_op("fused_relu_depthwise_conv2d_grad", grad_ins, grad_outs, attrs,
                         derived_from=grad_ops)
            ctx.count("fused grad")
