"""Lowering rules: one JAX function per op type, shared by the interpreter and the emitter.

A rule takes a RuleContext and the op's inputs by slot and returns its outputs by slot.
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

import jax
import jax.numpy as jnp

from ..ir.errors import GraphcError
from ..ir.grad_defs import GRAD_SUFFIX, forward_type
from ..ir.opdef import get_op_def
from ..ir.types import FLOAT_DTYPES, TensorType
from . import threefry
from .arrays import TensorArray
from .lod import LoDArray, first_lod, pair_dense_rows, unpair_rows, unwrap, wrap_outputs
from .precision import with_graphc_x64
from .selected_rows import SelectedRows

# Paddle programs use int64 labels and float64 checks. JAX keeps 64-bit types only in x64
# mode, which graphc enters around its own work (backends/precision.py), never globally.


class LoweringError(GraphcError):
    """An op has no lowering rule, or its rule failed; names the op and its line."""


class Replicas:
    """The data-parallel replicas a step runs on, as collective rules see them.

    ``nranks`` replicas form a ``(nranks // local, local)`` mesh with axes ``AXES``
    (``local`` < nranks only for hierarchical all-reduce). Under the JAX backend the step
    runs inside ``shard_map`` over that mesh and ``index`` is None (the replica number comes
    from ``lax.axis_index``); the interpreter simulates replicas one by one and sets it.
    """

    AXES = ("dp_cross", "dp_local")
    __slots__ = ("nranks", "local", "index")

    def __init__(self, nranks: int, local: int | None = None, index: int | None = None):
        local = nranks if local is None else local
        if nranks < 1 or local < 1 or nranks % local:
            raise LoweringError(f"{nranks} replicas cannot form groups of {local}")
        self.nranks, self.local, self.index = nranks, local, index

    def axes(self, group: str = "all"):
        """Mesh axis names of a group: every replica, those of one group, or across groups."""
        return {"all": self.AXES, "local": self.AXES[1], "cross": self.AXES[0]}[group]

    def axis_index(self):
        return self.index if self.index is not None else jax.lax.axis_index(self.AXES)

    def at(self, index: int) -> Replicas:
        return Replicas(self.nranks, self.local, index)

    def __repr__(self) -> str:
        return f"Replicas({self.nranks}, local={self.local}, index={self.index})"


def replica_groups(nranks: int, inter_nranks: int) -> int | None:
    """Replicas per group of a hierarchical all-reduce over ``nranks`` replicas, or None
    (one flat group) when ``inter_nranks`` forms no groups: 0 or 1, ``nranks`` or more, or
    not dividing ``nranks``. The hierarchical-allreduce pass declines exactly then, so its
    all-reduces stay flat, and the devices form a flat mesh (BuildStrategy's documented
    fallback) instead of a mesh that cannot exist."""
    return inter_nranks if 1 < inter_nranks < nranks and nranks % inter_nranks == 0 else None


# The host services (runtime/host_services.py) of the step being traced: the step builder
# sets them around its trace (``services_in_effect``), so a rule reads the services of the
# Executor that builds the step, never a module slot; unset outside a trace (None).
_TRACING_SERVICES: ContextVar = ContextVar("graphc_host_services", default=None)


@contextlib.contextmanager
def services_in_effect(services):
    """Rules traced inside the block see ``services`` as ``c.services``."""
    token = _TRACING_SERVICES.set(services)
    try:
        yield services
    finally:
        _TRACING_SERVICES.reset(token)


# -- what a forward rule leaves for its gradient op within one traced step ------------------
# A forward rule under a trace may leave what its ``T_grad`` op reuses (the pullback of a
# scan, so the backward pass does not run the forward loop again): keyed by the identity of
# a forward output, which the grad op receives as the same object. The table lives for one
# ``forward_stash()`` block (a step's trace, or one ``evaluate``): nothing outlives it, and
# without a block nothing is kept (the grad rule then differentiates the forward rule).
_FORWARD_STASH: ContextVar = ContextVar("graphc_forward_stash", default=None)


@contextlib.contextmanager
def forward_stash():
    """A block in which ``stash``/``stashed`` keep values (an enclosing one is reused)."""
    if _FORWARD_STASH.get() is not None:
        yield
        return
    token = _FORWARD_STASH.set({})
    try:
        yield
    finally:
        _FORWARD_STASH.reset(token)


@contextlib.contextmanager
def no_forward_stash():
    """A block in which nothing is stashed (a rule compiled on its own: what it would leave
    are tracers of its own trace, which must not reach another op)."""
    token = _FORWARD_STASH.set(None)
    try:
        yield
    finally:
        _FORWARD_STASH.reset(token)


def stash(key, value) -> None:
    """Keep ``value`` for ``stashed(key)`` until the enclosing block ends (none: dropped)."""
    table = _FORWARD_STASH.get()
    if table is not None:
        table[id(key)] = (key, value)  # the key is held, so its id is not reused meanwhile


def stashed(key):
    table = _FORWARD_STASH.get()
    entry = None if table is None else table.get(id(key))
    return entry[1] if entry is not None and entry[0] is key else None


class RuleContext:
    """What a rule sees besides its inputs: attrs, output types, randomness, replicas, and
    the host services of the step being built (``services``: None outside a step)."""

    __slots__ = ("op_type", "attrs", "out_types", "where", "seed_key", "step", "replicas")

    def __init__(self, op_type: str, attrs: dict[str, Any], out_types: dict[str, list],
                 where: str, seed_key: int, step, replicas: Replicas | None = None):
        self.op_type, self.attrs, self.out_types, self.where = op_type, attrs, out_types, where
        self.seed_key, self.step, self.replicas = seed_key, step, replicas

    def __getitem__(self, name: str) -> Any:
        return self.attrs[name]

    @property
    def services(self):
        """The HostServices of the Executor whose step is being traced (None: none)."""
        return _TRACING_SERVICES.get()

    def out_dtype(self, slot: str, i: int = 0):
        return jnp.dtype(self.out_types[slot][i].dtype)

    def rng(self, seed: int = 0):
        """The op's key for this step: its own ``seed`` attribute when non-zero, else the
        seed ``op_seed`` derived for it (see ``random_op_seed`` for the whole rule)."""
        return random_key(seed if seed else self.seed_key, self.step)

    def replica_rng(self, seed: int = 0):
        """``rng`` that also differs per data-parallel replica (dropout masks: replicas see
        different samples, so they draw independent masks); equal to ``rng`` on one."""
        key = self.rng(seed)
        return key if self.replicas is None else jax.random.fold_in(
            key, self.replicas.axis_index())


Rule = Callable[..., dict[str, Any]]
# registry: lowering rules by op type (@lowering)
_RULES: dict[str, Rule] = {}
# Ops whose result on one replica depends on the others (collectives, sync_batch_norm): the
# interpreter runs these jointly, ``fn(ctx, [inputs_by_slot of replica r ...]) -> [outputs of
# replica r ...]``, so every collective has a reference meaning without devices.
# registry: cross-replica reference rules
_REFERENCES: dict[str, Callable[..., list[dict[str, Any]]]] = {}


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


# Rules used instead of an op's own rule when a LoD value is among its inputs (docs/lod.md):
# they receive LoDArrays as they are, e.g. ``mean`` over the real tokens only. "@grad" is the
# generic gradient of an aware op (ops/sequence/lowering.py), for grad ops without a rule.
# registry: LoD-aware rules (@lod_lowering)
_LOD_RULES: dict[str, Rule] = {}


def lod_lowering(*op_types: str, when=None):
    """Register ``fn(ctx, **inputs)`` for op types when a LoD value is among the inputs;
    ``when(ctx, first LoD input)``, if given, narrows it further (concat along the tokens
    only): where it is false the op's ordinary LoD handling (row-wise) runs."""

    def deco(fn: Rule) -> Rule:
        for t in op_types:
            if t in _LOD_RULES:
                raise AssertionError(f"LoD lowering rule for {t} registered twice")
            _LOD_RULES[t] = fn if when is None else _Narrowed(fn, when)
        return fn

    return deco


class _Narrowed:
    """A LoD rule that applies only where ``when(ctx, lod)`` holds."""

    __slots__ = ("fn", "when")

    def __init__(self, fn: Rule, when):
        self.fn, self.when = fn, when

    def __call__(self, ctx, **kwargs):
        return self.fn(ctx, **kwargs)


def cross_replica(*op_types: str):
    """Register the interpreter's joint (all replicas at once) semantics of op types."""

    def deco(fn):
        for t in op_types:
            if t in _REFERENCES:
                raise AssertionError(f"cross-replica rule for {t} registered twice")
            _REFERENCES[t] = fn
        return fn

    return deco


def is_cross_replica(op_type: str) -> bool:
    return op_type in _REFERENCES


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
    fwd = forward_type(op_type)
    if fwd is not None and has_rule(fwd):  # T_grad_grad: the vjp of T_grad's rule, generic too
        return generic_grad
    raise LoweringError(f"{where or op_type}: no lowering rule for op type '{op_type}'")


def stable_seed(name: str, program_seed: int) -> int:
    """A 31-bit seed from the program's seed and a value name (crc32: stable across runs)."""
    return (zlib.crc32(name.encode()) ^ (program_seed * 0x9E3779B1)) & 0x7FFFFFFF


def random_op_seed(program_seed: int, position: int | None, name: str,
                   attr_seed: int = 0) -> int:
    """The integer seed of a random op (uniform_random, gaussian_random, dropout...): the one
    rule graphc uses, and the one anything that draws a random op's numbers must reproduce.

    - ``attr_seed`` (the op's own ``seed`` attribute; dropout's only with ``fix_seed``): when
      non-zero it wins, as in Paddle, where an initializer's explicit seed wins.
    - ``program_seed == 0`` (``Program.random_seed`` unset): ``stable_seed(name, 0)``, the
      crc32 of the op's first output name. This is graphc's original rule, kept so that
      existing checkpoints and tests that relied on it draw the same numbers; it makes the
      numbers depend on ``unique_name`` counters (two builds of one model may differ).
    - otherwise: a function of ``program_seed`` and ``position``, the op's index among the
      random ops of its program in program order (0, 1, ...), so two builds of one model
      with the same ``random_seed`` draw the same numbers whatever their names
      (``backends.evaluate.random_op_positions(graph)`` gives every op's position).
      ``position`` None (an op without the RANDOM trait) falls back to the name.

    The op's key for step ``t`` (its run counter) is ``random_key(seed, t)``; startup
    programs run at step 0.
    """
    if attr_seed:
        return int(attr_seed)
    if program_seed == 0 or position is None:
        return stable_seed(name, program_seed)
    return zlib.crc32(f"random_seed={program_seed};op={position}".encode()) & 0x7FFFFFFF


def random_key(seed: int, step=0):
    """The JAX key a random op draws from: ``seed`` (``random_op_seed``) folded with the
    step counter, so every run draws new numbers and a re-run from step 0 repeats them.
    Its numbers are ``jax.random.key(seed)``'s, hashed without loops (backends/threefry.py)."""
    shared = threefry.shared_key(seed, step)  # one hash made every op's key of this step
    return shared if shared is not None else jax.random.fold_in(threefry.key(seed), step)


@with_graphc_x64  # a rule called outside a step (tests, tools) keeps 64-bit types too
def apply_rule(op_type: str, attrs, ins: dict[str, list], out_types: dict[str, list],
               where: str, seed_key: int = 0, step=0, replicas=None) -> dict[str, list]:
    """Call the rule of ``op_type``; returns outputs as lists per slot, cast to their types."""
    opdef = get_op_def(op_type, where)
    rule = get_rule(op_type, where)
    kwargs = {}
    for slot in opdef.inputs:
        vals = ins.get(slot.name, [])
        kwargs[slot.name] = list(vals) if slot.duplicable else (vals[0] if vals else None)
    ctx = RuleContext(op_type, attrs, out_types, where, seed_key, step, replicas)
    lod = first_lod(kwargs.values()) if opdef.lod_inputs else None
    lod_rule = _LOD_RULES.get(op_type) if lod is not None else None
    if isinstance(lod_rule, _Narrowed) and not lod_rule.when(ctx, lod):
        lod_rule = None
    if lod_rule is not None:
        result = lod_rule(ctx, **kwargs)
    elif lod is not None and opdef.lod == "aware" and op_type not in _RULES \
            and "@grad" in _LOD_RULES:
        # an aware op's gradient without a rule of its own: the vjp over the tokens
        result = _LOD_RULES["@grad"](ctx, **kwargs)
    elif lod is not None and opdef.lod == "rowwise":  # the rule sees the packed tokens
        is_grad = forward_type(op_type) is not None
        kwargs, paired = pair_dense_rows(ctx, opdef.lod_inputs, kwargs, lod, not is_grad)
        result = wrap_outputs(rule(ctx, **{k: unwrap(v) for k, v in kwargs.items()}),
                              out_types, lod)
        if paired and is_grad:
            result = unpair_rows(result, paired, GRAD_SUFFIX)
    else:
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


@with_graphc_x64
def apply_cross_replica(op_type: str, attrs, ins: list[dict[str, list]],
                        out_types: dict[str, list], where: str, replicas: Replicas,
                        seed_key: int = 0, step=0) -> list[dict[str, list]]:
    """The joint rule of ``op_type`` over every replica's inputs (``ins[r]`` by slot)."""
    if len(ins) != replicas.nranks:
        raise LoweringError(f"{where}: {len(ins)} replicas' inputs for {replicas}")
    opdef = get_op_def(op_type, where)
    per_replica = []
    for r_ins in ins:
        kwargs = {}
        for slot in opdef.inputs:
            vals = r_ins.get(slot.name, [])
            kwargs[slot.name] = list(vals) if slot.duplicable else (vals[0] if vals else None)
        per_replica.append(kwargs)
    ctx = RuleContext(op_type, attrs, out_types, where, seed_key, step, replicas)
    results = _REFERENCES[op_type](ctx, per_replica)
    outs = []
    for result in results:
        r_out = {}
        for slot, types in out_types.items():
            vals = result[slot]
            vals = list(vals) if isinstance(vals, list | tuple) else [vals]
            r_out[slot] = [_as_type(v, t.dtype) for v, t in zip(vals, types)]
        outs.append(r_out)
    return outs


def _as_type(v, dtype: str):
    if isinstance(v, TensorArray):
        return v if v.data.dtype == dtype else v.astype(dtype)
    if isinstance(v, LoDArray):
        return v if v.data.dtype == dtype else v.astype(dtype)
    if isinstance(v, SelectedRows):
        return v if v.values.dtype == dtype else v.astype(dtype)
    v = jnp.asarray(v)
    return v if v.dtype == dtype else v.astype(dtype)


# -- the generic gradient: grad ops without a rule of their own ---------------------------
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
    followed = [s for s, g in grads.items() if g is not None and not _no_values(g)
                and all(t.dtype in FLOAT_DTYPES for t in out_types.get(s, []))]

    def forward(*diff):
        ins = dict(inputs)
        for slot, arr in zip(wanted, diff):
            ins[slot] = arr
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


def _no_values(g) -> bool:
    """An empty list: a duplicable slot given no value (no cotangent to follow)."""
    return isinstance(g, list) and not g


def _type_of(arr) -> TensorType:
    return TensorType(tuple(arr.shape), str(arr.dtype))
