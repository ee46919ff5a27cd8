"""Lowering rules of sequence_pool, and the generic gradient of a LoD-aware op (the vjp of its
forward rule over the tokens), which every family's aware ops fall back on.
"""

from __future__ import annotations

import jax

from ...backends.lod import LoDArray, pool, unwrap
from ...backends.lowering import LoweringError, RuleContext, get_rule, lod_lowering, lowering
from ...ir.grad_defs import GRAD_SUFFIX, forward_type
from ...ir.opdef import get_op_def
from ...ir.types import FLOAT_DTYPES, TensorType


def lod_vjp_grad(forward):
    """A grad rule for an aware op from its forward function ``forward(ctx, x: LoDArray)``:
    the vjp with respect to the tokens of X (lengths are integers: no gradient), returned as
    a LoD value with X's LoD. Padding rows get zero: the forward never reads them."""

    def rule(c, **kw):
        x = kw["X"]
        dout = kw["Out" + GRAD_SUFFIX]

        def f(data):
            return forward(c, x.with_data(data))

        out, vjp = jax.vjp(f, x.data)
        cot = jax.tree.map(lambda o, g: g.astype(o.dtype).reshape(o.shape), out, dout)
        (dx,) = vjp(cot)
        return {"X" + GRAD_SUFFIX: x.masked(dx)}

    return rule


@lod_lowering("@grad")
def lod_generic_grad(c, **kw):
    """The gradient of an aware op from its forward rule: the vjp with respect to the tokens
    of its LoD inputs and to its dense float inputs, LoD gradients masked (zero padding).
    Slots taking several values need a rule of their own."""
    fwd_type = forward_type(c.op_type)
    if fwd_type is None:
        raise LoweringError(f"{c.where}: no lowering rule for op type '{c.op_type}'")
    fwd = get_op_def(fwd_type)
    rule = get_rule(fwd_type)
    inputs = {s.name: kw.get(s.name) for s in fwd.inputs}
    wanted = [s[: -len(GRAD_SUFFIX)] for s in c.out_types]
    if any(isinstance(inputs.get(s), list) or inputs.get(s) is None for s in wanted):
        raise LoweringError(f"{c.where}: the generic LoD gradient takes single-valued "
                            f"forward inputs; give {c.op_type} a rule of its own")
    in_types = {s: [_type_of(v)] for s, v in inputs.items() if v is not None
                and not isinstance(v, list)}
    out_types = fwd.infer_types(in_types, c.attrs, c.where)
    grads = {s.name: kw.get(s.name + GRAD_SUFFIX) for s in fwd.outputs}
    followed = [s for s, g in grads.items() if g is not None
                and all(t.dtype in FLOAT_DTYPES for t in out_types.get(s, []))]

    def forward(*diff):
        ins = dict(inputs)
        for slot, arr in zip(wanted, diff):
            ins[slot] = inputs[slot].with_data(arr) if isinstance(inputs[slot], LoDArray) \
                else arr
        ctx = RuleContext(fwd_type, c.attrs, out_types, c.where, c.seed_key, c.step,
                          c.replicas)
        out = rule(ctx, **ins)
        return tuple(unwrap(out[s]) for s in followed)

    outs, vjp = jax.vjp(forward, *(unwrap(inputs[s]) for s in wanted))
    cot = tuple(unwrap(grads[s]).astype(o.dtype).reshape(o.shape)
                for s, o in zip(followed, outs))
    result = vjp(cot)
    return {s + GRAD_SUFFIX: inputs[s].masked(r) if isinstance(inputs[s], LoDArray) else r
            for s, r in zip(wanted, result)}


def _type_of(value) -> TensorType:
    if isinstance(value, LoDArray):
        return TensorType(tuple(value.data.shape), str(value.data.dtype), False,
                          value.lod_level)
    return TensorType(tuple(value.shape), str(value.dtype))


# -- sequence_pool ------------------------------------------------------------------------------

def _pool(c, x: LoDArray):
    return pool(x, c["pooltype"], c["pad_value"])


@lowering("sequence_pool")
def _sequence_pool(c, X):
    return {"Out": _pool(c, X)}


lowering("sequence_pool_grad")(lod_vjp_grad(_pool))
