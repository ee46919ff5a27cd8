"""Lowering rules for gradient ops: a generic one through ``jax.vjp`` of the forward rule,
and hand-written ones where the grad op does not see the forward inputs (Paddle's relu_grad
reads Out) or where re-running the forward would be wrong (dropout's random mask)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ...ir.ops import GRAD_SUFFIX, forward_type, get_op_def
from ...ir.types import FLOAT_DTYPES, TensorType
from ..selected_rows import ROWS_DTYPE, SelectedRows
from .nn import batch_norm_train
from .registry import get_rule, lowering


def generic_grad(c, **kw):
    """d(inputs) = vjp of the forward rule at the forward inputs, with the given cotangents."""
    fwd_type = forward_type(c.op_type)
    fwd = get_op_def(fwd_type)
    rule = get_rule(fwd_type)
    inputs = {s.name: kw.get(s.name) for s in fwd.inputs}
    missing = [s for s in c.out_types if inputs.get(s[: -len(GRAD_SUFFIX)]) is None]
    if missing:
        raise ValueError(f"{c.op_type} needs the forward inputs for {missing}")
    wanted = [s[: -len(GRAD_SUFFIX)] for s in c.out_types]
    in_types = {s: [_type_of(a) for a in (v if isinstance(v, list) else [v])]
                for s, v in inputs.items() if v is not None}
    out_types = fwd.infer_types(in_types, c.attrs, c.where)
    # cotangents for the forward outputs that have a gradient; the rest are not followed
    grads = {s.name: kw.get(s.name + GRAD_SUFFIX) for s in fwd.outputs}
    followed = [s for s, g in grads.items() if g is not None
                and all(t.dtype in FLOAT_DTYPES for t in out_types.get(s, []))]

    def forward(*diff):
        ins = dict(inputs)
        for slot, arr in zip(wanted, diff):
            ins[slot] = arr
        from .registry import RuleContext
        ctx = RuleContext(fwd_type, c.attrs, out_types, c.where, c.seed_key, c.step,
                          c.replicas)
        out = rule(ctx, **ins)
        return tuple(out[s] for s in followed)

    primals = [inputs[s] for s in wanted]
    outs, vjp = jax.vjp(forward, *primals)
    cot = []
    for s, o in zip(followed, outs):
        g = grads[s]
        cot.append([gi.astype(oi.dtype) for gi, oi in zip(g, o)] if isinstance(o, list)
                   else g.astype(o.dtype).reshape(o.shape))
    result = vjp(tuple(cot))
    return {s + GRAD_SUFFIX: r for s, r in zip(wanted, result)}


def _type_of(arr) -> TensorType:
    return TensorType(tuple(arr.shape), str(arr.dtype))


def _dout(kw, slot="Out"):
    return kw[slot + GRAD_SUFFIX]


@lowering("relu_grad")
def _relu_grad(c, **kw):
    out = kw["Out"] if kw.get("Out") is not None else jnp.maximum(kw["X"], 0)
    return {"X@GRAD": jnp.where(out > 0, _dout(kw), jnp.zeros((), out.dtype))}


@lowering("sigmoid_grad")
def _sigmoid_grad(c, **kw):
    out = kw["Out"] if kw.get("Out") is not None else jax.nn.sigmoid(kw["X"])
    return {"X@GRAD": _dout(kw) * out * (1 - out)}


@lowering("tanh_grad")
def _tanh_grad(c, **kw):
    out = kw["Out"] if kw.get("Out") is not None else jnp.tanh(kw["X"])
    return {"X@GRAD": _dout(kw) * (1 - out * out)}


@lowering("dropout_grad")
def _dropout_grad(c, **kw):
    dout, mask = _dout(kw), kw["Mask"].astype(_dout(kw).dtype)
    p = c["dropout_prob"]
    if c["is_test"]:
        scale = 1.0 if c["dropout_implementation"] == "upscale_in_train" else 1.0 - p
        return {"X@GRAD": dout * jnp.asarray(scale, dout.dtype)}
    if c["dropout_implementation"] == "upscale_in_train":
        mask = mask / jnp.asarray(1.0 - p, dout.dtype) if p < 1.0 else mask * 0
    return {"X@GRAD": dout * mask}


@lowering("softmax_with_cross_entropy_grad")
def _softmax_ce_grad(c, **kw):
    softmax, label = kw["Softmax"], kw["Label"]
    dloss, dsoftmax = kw.get("Loss@GRAD"), kw.get("Softmax@GRAD")
    axis = c["axis"] % softmax.ndim
    dlogits = jnp.zeros_like(softmax)
    if dloss is not None:  # Paddle's formula: soft labels are taken to sum to 1
        if c["soft_label"]:
            dlogits = (softmax - label) * dloss
        else:
            lab = jnp.squeeze(label, axis).astype(jnp.int32)
            onehot = jax.nn.one_hot(lab, softmax.shape[axis], dtype=softmax.dtype, axis=axis)
            keep = jnp.expand_dims(lab != c["ignore_index"], axis)
            dlogits = jnp.where(keep, (softmax - onehot) * dloss, jnp.zeros((), softmax.dtype))
    if dsoftmax is not None:  # Softmax also used downstream: add the softmax vjp
        dsoftmax = dsoftmax.astype(softmax.dtype)
        dlogits = dlogits + softmax * (
            dsoftmax - jnp.sum(dsoftmax * softmax, axis=axis, keepdims=True))
    return {"Logits@GRAD": dlogits}


@lowering("batch_norm_grad")
def _batch_norm_grad(c, **kw):
    x, scale, bias, dy = kw["X"], kw["Scale"], kw["Bias"], kw["Y@GRAD"]
    layout, eps = c["data_layout"], c["epsilon"]
    if c["is_test"] or c["use_global_stats"]:
        shape = [1] * x.ndim
        shape[x.ndim - 1 if layout == "NHWC" else 1] = -1
        inv = jax.lax.rsqrt(kw["Variance"] + jnp.asarray(eps, scale.dtype))

        def fwd(x, s, b):
            return ((x.astype(s.dtype) - kw["Mean"].reshape(shape)) * (inv * s).reshape(shape)
                    + b.reshape(shape)).astype(x.dtype)
    else:
        def fwd(x, s, b):
            return batch_norm_train(x, s, b, eps, layout)[0]
    _, vjp = jax.vjp(fwd, x, scale, bias)
    dx, ds, db = vjp(dy.astype(x.dtype))
    out = {"X@GRAD": dx, "Scale@GRAD": ds, "Bias@GRAD": db}
    return {k: v for k, v in out.items() if k in c.out_types}


def looked_up_rows(ids, dout, height: int, width: int, dtype, pad: int):
    """(rows, values) of a lookup's row gradient: one row per id, the ids at ``pad`` (-1:
    none) zero values and padding rows (row = height)."""
    ids = ids.reshape(-1)
    values = dout.reshape(ids.shape[0], width).astype(dtype)
    rows = ids.astype(ROWS_DTYPE)
    if pad != -1:
        at_pad = ids == pad
        values = jnp.where(at_pad[:, None], jnp.zeros((), values.dtype), values)
        rows = jnp.where(at_pad, jnp.asarray(height, ROWS_DTYPE), rows)
    return rows, values


@lowering("lookup_table_grad")
def _lookup_table_grad(c, **kw):
    """W@GRAD: one row per id (``is_sparse``: as a SelectedRows, never the whole table), or
    the dense table of their sums. Ids at ``padding_idx`` contribute nothing: zeros in the
    dense gradient, padding rows (row = height) in the sparse one."""
    table = kw["W"]
    height, width = table.shape
    rows, values = looked_up_rows(kw["Ids"], _dout(kw), height, width, table.dtype,
                                  c["padding_idx"])
    if c["is_sparse"]:
        return {"W@GRAD": SelectedRows(rows, values, height)}
    # padding ids carry zero values: adding them at row `height` is dropped by scatter
    return {"W@GRAD": jnp.zeros_like(table).at[rows].add(values, mode="drop")}
