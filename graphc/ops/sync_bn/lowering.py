"""Lowering rules for sync_batch_norm and its gradient: with ``lax.psum`` of per-channel sums
over the replicas' mesh, and, for simulated replicas, as batch_norm over the whole batch.

The two are written independently (sums and psums here, batch_norm's own rules over the
concatenated batch for the reference), so equal results check one against the other.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from ...backends.lowering import LoweringError, RuleContext, apply_rule, cross_replica, lowering
from ...ir.grad_defs import GRAD_SUFFIX
from ...ir.types import TensorType

_BN_SLOTS = ("X", "Scale", "Bias", "Mean", "Variance", "SavedMean", "SavedVariance")


def _replicas(c: RuleContext):
    """The replicas, or None on one rank (then the op is batch_norm and nothing is exchanged)."""
    r = c.replicas
    if r is None:
        if c["nranks"] == 1:
            return None
        raise LoweringError(f"{c.where}: sync_batch_norm over {c['nranks']} replicas needs a "
                            "data-parallel step (with_data_parallel, or the interpreter's "
                            "run_replicas)")
    if r.nranks != c["nranks"]:
        raise LoweringError(f"{c.where}: the op was built for {c['nranks']} replicas but runs "
                            f"on {r.nranks}")
    return r


def _psum(x, r):
    return x if r is None else lax.psum(x, r.axes())


def _layout(x, layout: str):
    """(reduced axes, broadcast shape of a per-channel vector, samples per channel here)."""
    ch = x.ndim - 1 if layout == "NHWC" else 1
    axes = tuple(i for i in range(x.ndim) if i != ch)
    shape = [1] * x.ndim
    shape[ch] = -1
    return axes, shape, math.prod(x.shape[i] for i in axes)


def _frozen(c: RuleContext) -> bool:
    return bool(c["is_test"] or c["use_global_stats"])


def _bn_attrs(c: RuleContext) -> dict:
    return {k: v for k, v in c.attrs.items() if k != "nranks"}


# -- on devices (inside shard_map over the replicas' mesh) ------------------------------
@lowering("sync_batch_norm")
def _sync_batch_norm(c: RuleContext, X, Scale, Bias, Mean, Variance):
    if _frozen(c):  # running statistics: nothing to synchronise
        return _as_batch_norm(c, "batch_norm", dict(X=X, Scale=Scale, Bias=Bias, Mean=Mean,
                                                    Variance=Variance))
    r = _replicas(c)
    axes, shape, local_n = _layout(X, c["data_layout"])
    count = jnp.asarray(local_n * (r.nranks if r else 1), Scale.dtype)
    xf = X.astype(Scale.dtype)
    # Two passes (global mean, then the global mean of squared deviations) rather than
    # E[x^2] - E[x]^2, which cancels catastrophically when |mean| >> std.
    mean = _psum(jnp.sum(xf, axis=axes), r) / count
    centred = xf - mean.reshape(shape)
    var = _psum(jnp.sum(jnp.square(centred), axis=axes), r) / count
    inv = lax.rsqrt(var + jnp.asarray(c["epsilon"], var.dtype))
    y = centred * (inv * Scale).reshape(shape) + Bias.reshape(shape)
    m = jnp.asarray(c["momentum"], Mean.dtype)
    return {"Y": y.astype(X.dtype), "MeanOut": Mean * m + mean * (1 - m),
            "VarianceOut": Variance * m + var * (1 - m), "SavedMean": mean,
            "SavedVariance": inv}


@lowering("sync_batch_norm_grad")
def _sync_batch_norm_grad(c: RuleContext, **kw):
    """dX = scale * inv * (dY - sum(dY) / M - x_hat * sum(dY * x_hat) / M), the sums over all
    M samples of every replica; Scale@GRAD and Bias@GRAD are the local sums (this replica's
    share: the gradient all-reduce adds the shares up)."""
    if _frozen(c):
        return _as_batch_norm(c, "batch_norm_grad", kw)
    r = _replicas(c)
    x, scale, dy = kw["X"], kw["Scale"], kw["Y" + GRAD_SUFFIX]
    axes, shape, local_n = _layout(x, c["data_layout"])
    mean, inv = kw["SavedMean"], kw["SavedVariance"]
    x_hat = (x.astype(scale.dtype) - mean.reshape(shape)) * inv.reshape(shape)
    dyf = dy.astype(scale.dtype)
    d_bias = jnp.sum(dyf, axis=axes)
    d_scale = jnp.sum(dyf * x_hat, axis=axes)
    out = {"Scale" + GRAD_SUFFIX: d_scale, "Bias" + GRAD_SUFFIX: d_bias}
    if "X" + GRAD_SUFFIX in c.out_types:
        count = jnp.asarray(local_n * (r.nranks if r else 1), scale.dtype)
        # one exchange for both sums
        sums = _psum(jnp.stack([d_bias, d_scale]), r) / count
        dx = (scale * inv).reshape(shape) * (
            dyf - sums[0].reshape(shape) - x_hat * sums[1].reshape(shape))
        out["X" + GRAD_SUFFIX] = dx.astype(x.dtype)
    return {k: v for k, v in out.items() if k in c.out_types}


def _as_batch_norm(c: RuleContext, op_type: str, ins: dict) -> dict:
    """Run batch_norm's (or its grad's) rule with this op's attributes and output types."""
    ins = {s: [v] for s, v in ins.items() if v is not None}
    out = apply_rule(op_type, _bn_attrs(c), ins, c.out_types, c.where, c.seed_key, c.step)
    return {s: v[0] for s, v in out.items()}


# -- simulated replicas (the interpreter): batch_norm over the concatenated batch -----------
def _types(c: RuleContext, batch: int) -> dict:
    """Output types of the op on the whole batch (the IR's are one replica's)."""
    return {s: [TensorType((batch, *t.shape[1:]) if s in ("Y", "X" + GRAD_SUFFIX) else t.shape,
                           t.dtype) for t in ts] for s, ts in c.out_types.items()}


def _split(whole, sizes: list[int]) -> list:
    out, start = [], 0
    for n in sizes:
        out.append(whole[start:start + n])
        start += n
    return out


@cross_replica("sync_batch_norm")
def _sync_batch_norm_ref(c: RuleContext, per_replica: list[dict]) -> list[dict]:
    if _frozen(c):
        return [_as_batch_norm(c, "batch_norm", ins) for ins in per_replica]
    _replicas(c)
    sizes = [ins["X"].shape[0] for ins in per_replica]
    x = jnp.concatenate([ins["X"] for ins in per_replica])
    results = []
    for ins in per_replica:  # each replica updates its own running statistics
        stats = {s: [ins[s]] for s in _BN_SLOTS[1:5]}
        whole = apply_rule("batch_norm", _bn_attrs(c), {**stats, "X": [x]},
                           _types(c, x.shape[0]), c.where)
        results.append({s: v[0] for s, v in whole.items()})
    ys = _split(results[0]["Y"], sizes)
    return [{**res, "Y": y} for res, y in zip(results, ys)]


@cross_replica("sync_batch_norm_grad")
def _sync_batch_norm_grad_ref(c: RuleContext, per_replica: list[dict]) -> list[dict]:
    if _frozen(c):
        return [_as_batch_norm(c, "batch_norm_grad", ins) for ins in per_replica]
    _replicas(c)
    dy_slot = "Y" + GRAD_SUFFIX
    sizes = [ins["X"].shape[0] for ins in per_replica]
    x = jnp.concatenate([ins["X"] for ins in per_replica])
    dys = [ins[dy_slot] for ins in per_replica]
    first = per_replica[0]
    types = _types(c, x.shape[0])

    def bn_grad(dy):
        ins = {s: [first[s]] for s in _BN_SLOTS[1:] if first.get(s) is not None}
        return {s: v[0] for s, v in apply_rule("batch_norm_grad", _bn_attrs(c),
                                               {**ins, "X": [x], dy_slot: [dy]}, types,
                                               c.where).items()}

    # X@GRAD: batch_norm's gradient on the whole batch with every replica's Y@GRAD.
    dx = _split(bn_grad(jnp.concatenate(dys))["X" + GRAD_SUFFIX], sizes) \
        if "X" + GRAD_SUFFIX in c.out_types else [None] * len(sizes)
    outs = []
    for r, dx_r in enumerate(dx):
        # This replica's share of Scale@GRAD / Bias@GRAD: the whole batch's gradient with
        # the other replicas' Y@GRAD zeroed (it is linear in Y@GRAD).
        only_r = jnp.concatenate([d if k == r else jnp.zeros_like(d)
                                  for k, d in enumerate(dys)])
        share = bn_grad(only_r)
        share["X" + GRAD_SUFFIX] = dx_r
        outs.append({s: share[s] for s in c.out_types})
    return outs
