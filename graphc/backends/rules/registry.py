"""Lowering rules: one JAX function per op type, shared by the interpreter and the emitter.

A rule takes a RuleContext and the op's inputs by slot and returns its outputs by slot.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from ...ir.errors import GraphcError
from ...ir.ops import get_op_def

# Paddle programs use int64 labels and float64 checks: JAX must keep 64-bit types.
jax.config.update("jax_enable_x64", True)


class LoweringError(GraphcError):
    """An op has no lowering rule, or its rule failed; names the op and its line."""


class RuleContext:
    """What a rule sees besides its inputs: attrs, output types, randomness, replicas."""

    __slots__ = ("op_type", "attrs", "out_types", "where", "seed_key", "step", "axis_name")

    def __init__(self, op_type: str, attrs: dict[str, Any], out_types: dict[str, list],
                 where: str, seed_key: int, step, axis_name: str | None = None):
        self.op_type, self.attrs, self.out_types, self.where = op_type, attrs, out_types, where
        self.seed_key, self.step, self.axis_name = seed_key, step, axis_name

    def __getitem__(self, name: str) -> Any:
        return self.attrs[name]

    def out_dtype(self, slot: str, i: int = 0):
        return jnp.dtype(self.out_types[slot][i].dtype)

    def rng(self, seed: int = 0):
        """A key that differs per op (by its output's name) and per step, fixed by the seed.

        The op's name, not its position, keys it, so passes that move ops keep the numbers.
        """
        key = jax.random.key(seed if seed else self.seed_key)
        return jax.random.fold_in(key, self.step)


Rule = Callable[..., dict[str, Any]]
_RULES: dict[str, Rule] = {}


def lowering(*op_types: str):
    """Register ``fn(ctx, **inputs_by_slot) -> {slot: array or [arrays]}`` for op types.

    Non-duplicable slots arrive as one array (None when absent); duplicable ones as lists.
    """

    def deco(fn: Rule) -> Rule:
        for t in op_types:
            if t in _RULES:
                raise AssertionError(f"lowering rule for {t} registered twice")
            _RULES[t] = fn
        return fn

    return deco


def has_rule(op_type: str) -> bool:
    try:
        get_rule(op_type)
        return True
    except LoweringError:
        return False


def get_rule(op_type: str, where: str = "") -> Rule:
    """The op's own rule; a gradient op without one differentiates its forward rule."""
    rule = _RULES.get(op_type)
    if rule is not None:
        return rule
    from ...ir.ops import forward_type
    fwd = forward_type(op_type)
    if fwd is not None and fwd in _RULES:
        from .grads import generic_grad
        return generic_grad
    raise LoweringError(f"{where or op_type}: no lowering rule for op type '{op_type}'")


def stable_seed(name: str, program_seed: int) -> int:
    """A 31-bit seed from the program's seed and a value name (crc32: stable across runs)."""
    return (zlib.crc32(name.encode()) ^ (program_seed * 0x9E3779B1)) & 0x7FFFFFFF


def apply_rule(op_type: str, attrs, ins: dict[str, list], out_types: dict[str, list],
               where: str, seed_key: int = 0, step=0, axis_name=None) -> dict[str, list]:
    """Call the rule of ``op_type``; returns outputs as lists per slot, cast to their types."""
    opdef = get_op_def(op_type, where)
    rule = get_rule(op_type, where)
    kwargs = {}
    for slot in opdef.inputs:
        vals = ins.get(slot.name, [])
        kwargs[slot.name] = list(vals) if slot.duplicable else (vals[0] if vals else None)
    ctx = RuleContext(op_type, attrs, out_types, where, seed_key, step, axis_name)
    # Slot names such as "Out@GRAD" are not identifiers: such rules take **kw.
    result = rule(ctx, **kwargs)
    outs = {}
    for slot, types in out_types.items():
        if slot not in result:
            raise LoweringError(f"{where}: rule for {op_type} did not produce output '{slot}'")
        vals = result[slot]
        vals = list(vals) if isinstance(vals, list | tuple) else [vals]
        outs[slot] = [_as_type(v, t.dtype) for v, t in zip(vals, types)]
    return outs


def _as_type(v, dtype: str):
    v = jnp.asarray(v)
    return v if v.dtype == dtype else v.astype(dtype)
