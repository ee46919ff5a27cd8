"""Gradient op definitions, derived from forward ones: ``T_grad`` for each differentiable T.

Slots: T's inputs and outputs (optional), ``<out>@GRAD`` inputs, ``<in>@GRAD`` outputs.
"""

from __future__ import annotations

from .opdef import (
    _REGISTRY,
    INITIALIZER,
    NO_GRAD,
    InferContext,
    OpDef,
    SlotDef,
    get_op_def,
    set_lod_rule,
)
from .types import FLOAT_DTYPES, sparse_type

GRAD_SUFFIX = "@GRAD"

# What each T_grad reads and produces is declared where T is registered (register's
# grad_reads, grad_type_from and sparse_grad keywords, docs/adding_an_op.md).


def grad_op_type(op_type: str) -> str:
    return op_type + "_grad"


def forward_type(grad_type: str) -> str | None:
    if grad_type.endswith("_grad"):
        base = grad_type[: -len("_grad")]
        if base in _REGISTRY and is_differentiable(base):
            return base
    return None


# Ops whose gradient op is differentiated again (``fluid.gradients`` of a gradient, a gradient
# penalty): Paddle 1.8's double-grad ops and the common ones around them. ``T_grad_grad`` is
# derived from ``T_grad`` as ``T_grad`` is from T (its rule: the vjp of T_grad's rule); a
# gradient op of any other T on a second gradient's path is refused by name (backward.py).
DOUBLE_GRAD_OPS = frozenset({
    "relu", "leaky_relu", "elu", "sigmoid", "tanh", "square", "sqrt", "exp", "log", "abs",
    "pow", "softplus", "scale", "elementwise_add", "elementwise_sub", "elementwise_mul",
    "elementwise_div", "matmul", "mul", "conv2d", "depthwise_conv2d", "batch_norm",
    "instance_norm", "layer_norm", "reduce_mean", "reduce_sum", "mean", "sum", "softmax",
    "reshape2", "transpose2", "squeeze2", "unsqueeze2", "concat", "slice", "split", "stack",
    "expand", "pad", "pad2d", "cast", "assign", "gather", "clip",
})


def is_differentiable(op_type: str) -> bool:
    opdef = get_op_def(op_type)
    if opdef.traits & {NO_GRAD, INITIALIZER}:
        return False
    if not op_type.endswith("_grad"):
        return True
    # a gradient op: only T_grad of a double-grad T (never T_grad_grad)
    base = op_type[: -len("_grad")]
    return base in DOUBLE_GRAD_OPS and grad_op_type(op_type) in _REGISTRY


def default_grad_maker(op_type: str):
    """A grad maker: (forward inputs, outputs, attrs, output grads, input grads by slot)
    -> [(grad op type, inputs, outputs, attrs)]. Names of absent grads are None."""
    reads = _REGISTRY[op_type].grad_read_slots

    def make(inputs, outputs, attrs, out_grads, in_grads):
        ins = {s: list(v) for s, v in {**inputs, **outputs}.items() if s in reads}
        for slot, names in out_grads.items():
            if any(n is not None for n in names):
                if None in names:  # duplicable output with some grads missing: not supported
                    raise ValueError(f"{op_type}: gradient of only some of {slot}")
                ins[slot + GRAD_SUFFIX] = list(names)
        outs = {slot + GRAD_SUFFIX: names for slot, names in in_grads.items()
                if any(n is not None for n in names)}
        return [(grad_op_type(op_type), ins, outs, dict(attrs))]

    # Its ops are valid by construction (slots from the forward definition, attributes the
    # forward op's normalised ones), so backward may append them without re-checking.
    make.trusted = True
    return make


def _make_infer(fwd: OpDef):
    type_from = fwd.grad_type_from
    sparse_slot, sparse_attr = fwd.sparse_grad or (None, None)

    def infer(c: InferContext):
        out = {}
        for slot in fwd.inputs:
            src = slot.name if c.has(slot.name) else type_from.get(slot.name)
            if src and c.has(src):
                out[slot.name + GRAD_SUFFIX] = list(c.xs(src))
        if sparse_slot is not None and c[sparse_attr] and sparse_slot + GRAD_SUFFIX in out:
            (dense,) = out[sparse_slot + GRAD_SUFFIX]
            out[sparse_slot + GRAD_SUFFIX] = [sparse_type(dense.shape, dense.dtype)]
        # integer inputs (labels, ids) have no gradient: the op cannot produce one
        return {k: v for k, v in out.items() if all(t.dtype in FLOAT_DTYPES for t in v)}
    return infer


def _grad_lod_rule(fwd: OpDef, grad: OpDef) -> None:
    """A grad op treats LoD values as its forward op does (docs/lod.md): the gradient of a
    LoD input is a LoD value with the same LoD; the forward outputs and their gradients
    that may be LoD are taken as such."""
    lod_outs = [s for s in fwd.output_names if fwd.lod == "aware" or not fwd.lod_outputs
                or s in fwd.lod_outputs]
    inputs = {*fwd.lod_inputs, *lod_outs, *(s + GRAD_SUFFIX for s in lod_outs)}
    type_from = fwd.grad_type_from
    outputs = {s + GRAD_SUFFIX: tuple(x for x in (s, type_from.get(s)) if x in inputs)
               for s in fwd.input_names}  # an empty tuple: a dense gradient (fc's W)
    set_lod_rule(grad, fwd.lod, inputs, outputs if fwd.lod == "rowwise" else None,
                 max_level=fwd.max_lod_level)


def register_grad_ops() -> None:
    """Register ``T_grad`` for every differentiable forward op, then ``T_grad_grad`` for the
    double-grad ones (idempotent)."""
    for op_type in list(_REGISTRY):
        if not op_type.endswith("_grad"):
            _register_grad(op_type)
    for op_type in DOUBLE_GRAD_OPS:
        if grad_op_type(op_type) in _REGISTRY:
            _register_grad(grad_op_type(op_type), double=True)


def _register_grad(op_type: str, double: bool = False) -> None:
    gtype = grad_op_type(op_type)
    if gtype in _REGISTRY or not (double or is_differentiable(op_type)):
        return
    fwd = _REGISTRY[op_type]
    ins = [SlotDef(s.name, True, s.duplicable) for s in fwd.inputs]
    ins += [SlotDef(s.name, True, s.duplicable) for s in fwd.outputs]
    ins += [SlotDef(s.name + GRAD_SUFFIX, True, s.duplicable) for s in fwd.outputs]
    outs = [SlotDef(s.name + GRAD_SUFFIX, True, s.duplicable) for s in fwd.inputs]
    _REGISTRY[gtype] = OpDef(gtype, tuple(ins), tuple(outs), dict(fwd.attrs),
                             _make_infer(fwd), frozenset(), {},
                             doc=f"gradient of {op_type}", regions=fwd.regions)
    if fwd.lod_inputs and not double:  # a second gradient takes dense values only
        _grad_lod_rule(fwd, _REGISTRY[gtype])
    if fwd.grad_maker is None:
        fwd.grad_maker = default_grad_maker(op_type)
