"""Lowering rules for the multi-parameter optimizer ops (fused_sgd, fused_momentum, fused_adam,
fused_adamw) in both layouts; each gives what the single-parameter ops would, element for element.

``multi_tensor`` applies the single-parameter op's own rule to each member. ``coalesced``
concatenates every per-parameter slot into one flat buffer, updates it with one elementwise
computation and splits the results back to the members' shapes.
"""

from __future__ import annotations

import jax.numpy as jnp

from ...backends.lowering import LoweringError, RuleContext, get_rule, lowering
from .defs import FUSED_OPTIMIZERS, SHARED_SLOT, base_attrs, base_type


def _base_context(c: RuleContext) -> RuleContext:
    return RuleContext(base_type(c.op_type), base_attrs(c.attrs), {}, c.where, c.seed_key,
                       c.step, c.replicas)


def _multi_tensor(c: RuleContext, slots: dict) -> dict[str, list]:
    rule, bc = get_rule(base_type(c.op_type)), _base_context(c)
    outs: dict[str, list] = {}
    for i in range(len(slots["Param"])):
        member = {s: (v if s == SHARED_SLOT else v[i]) for s, v in slots.items()}
        for slot, value in rule(bc, **member).items():
            outs.setdefault(slot, []).append(value)
    return outs


def _flat(arrays: list):
    return jnp.concatenate([a.reshape(-1) for a in arrays]) if len(arrays) > 1 \
        else arrays[0].reshape(-1)


def _split(flat, like: list) -> list:
    out, start = [], 0
    for a in like:
        out.append(flat[start:start + a.size].reshape(a.shape))
        start += a.size
    return out


def _per_element(scalars: list, like: list):
    """One scalar per member, repeated over that member's elements of the flat buffer."""
    return jnp.concatenate([jnp.broadcast_to(s, (a.size,)) for s, a in zip(scalars, like)])


def _lr(lr, like):
    return lr.reshape(()).astype(like.dtype)


def _adam_coalesced(c: RuleContext, params: list, grads: list, lr, m1s: list, m2s: list,
                    b1pows: list, b2pows: list) -> dict[str, list]:
    """optim.adam_update on flat buffers: the same operations in the same order, with the
    step size and epsilon scale computed per member from its own beta powers."""
    param, m1, m2 = _flat(params), _flat(m1s), _flat(m2s)
    b1, b2 = jnp.asarray(c["beta1"], m1.dtype), jnp.asarray(c["beta2"], m1.dtype)
    if c.op_type == "fused_adamw" and c["with_decay"]:  # optim._adamw: decay first
        decay = _lr(lr, param) * jnp.asarray(c["lr_ratio"] * c["coeff"], param.dtype)
        param = param * (1 - decay)
    g = _flat(grads).astype(m1.dtype)
    m1 = b1 * m1 + (1 - b1) * g
    m2 = b2 * m2 + (1 - b2) * g * g
    lr_ts, eps_ts = [], []
    eps = jnp.asarray(c["epsilon"], m1.dtype)
    for b1pow, b2pow in zip(b1pows, b2pows):
        b1p, b2p = b1pow.reshape(()), b2pow.reshape(())
        lr_ts.append(_lr(lr, m1) * jnp.sqrt(1 - b2p) / (1 - b1p))
        eps_ts.append(eps * jnp.sqrt(1 - b2p))
    lr_t, eps_t = _per_element(lr_ts, params), _per_element(eps_ts, params)
    param = param - (lr_t * (m1 / (jnp.sqrt(m2) + eps_t))).astype(param.dtype)
    return {"ParamOut": _split(param, params), "Moment1Out": _split(m1, m1s),
            "Moment2Out": _split(m2, m2s), "Beta1PowOut": [p * b1 for p in b1pows],
            "Beta2PowOut": [p * b2 for p in b2pows]}


def _coalesced(c: RuleContext, slots: dict) -> dict[str, list]:
    base = base_type(c.op_type)
    if base in ("adam", "adamw"):
        return _adam_coalesced(c, slots["Param"], slots["Grad"], slots[SHARED_SLOT],
                               slots["Moment1"], slots["Moment2"], slots["Beta1Pow"],
                               slots["Beta2Pow"])
    # sgd and momentum are elementwise with scalar hyper-parameters: their own rule applies
    # to the flat buffers as it is.
    flat = {s: (v if s == SHARED_SLOT else _flat(v)) for s, v in slots.items()}
    result = get_rule(base)(_base_context(c), **flat)
    like = {"ParamOut": slots["Param"], "VelocityOut": slots.get("Velocity")}
    return {s: _split(v, like[s]) for s, v in result.items()}


@lowering(*FUSED_OPTIMIZERS.values())
def _fused_optimizer(c: RuleContext, **slots):
    if c["layout"] == "multi_tensor":
        return _multi_tensor(c, slots)
    if c["layout"] == "coalesced":
        return _coalesced(c, slots)
    raise LoweringError(f"{c.where}: unknown layout {c['layout']!r}")
