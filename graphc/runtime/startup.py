"""Run a startup program in groups: its initialisers by kind, not one XLA computation of all.

A startup program is mostly initialisers (fill_constant, uniform_random, gaussian_random):
one per parameter, accumulator and counter, none reading anything. Compiled as one XLA
computation, a deep model's startup costs XLA minutes (compile time grows with the number
of ops). Here fill_constant values are made on the host, and every random initialiser of
one kind and dtype is drawn by one compiled function whatever the shapes
(``startup_draws``), so the compile work is one small function per kind, reused by every
model of a similar size (and kept by the persistent compilation cache). Every op draws
from the key the one-computation path gives it (``random_op_seed`` with the op's position,
folded with the run counter), and the values are the same bit for bit (tests compare).

Any other op (an ``assign``, a ``scale``, a collective...) runs after them, in one jitted
function of the ops that are not grouped, reading the grouped values and the scope as the
one-computation path would (SSA keeps the order: an op reads exactly the version it read
before). A remainder whose rules check data, a CompiledProgram, feeds or fetches: the
executor runs the program whole, as before. ``use_grouped_startup(False)`` (a context
manager, for tests and benchmarks) runs startup programs as one computation again.
"""

from __future__ import annotations

import contextlib
import math
from contextvars import ContextVar
from dataclasses import dataclass, field

import jax
import numpy as np

from ..backends.data_checks import collecting
from ..backends.evaluate import evaluate, op_seed
from ..backends.lowering import services_in_effect
from ..ir.errors import GraphcError
from ..ir.graph import Graph, Op, Value
from .compile_cache import ensure_compilation_cache
from .startup_draws import (
    RANDOM_INITIALISERS,
    draw_random,
    fill_constants,
    flat_draws_supported,
    is_float,
)

__all__ = ["run_grouped_startup", "use_grouped_startup"]

# Whether startup programs run grouped: a context-scoped setting (use_grouped_startup), not a
# module slot, so a block that turns it off affects only its own thread and is undone on exit.
_GROUPED: ContextVar = ContextVar("graphc_grouped_startup", default=True)
# Elements per flat draw: bounds the draw's temporaries (a few bytes per element).
_CHUNK = 1 << 26
# Ops that pass their input on unchanged (no arithmetic XLA could fold across).
_EXACT_COPIES = frozenset({"assign"})


@contextlib.contextmanager
def use_grouped_startup(enabled: bool):
    """Within the block, startup programs run grouped (True, the default) or as one XLA
    computation of all their ops (False: the original path, kept for comparison)."""
    token = _GROUPED.set(bool(enabled))
    try:
        yield
    finally:
        _GROUPED.reset(token)


def _frozen(x):
    if isinstance(x, list | tuple):
        return tuple(_frozen(i) for i in x)
    if isinstance(x, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in x.items()))
    if isinstance(x, float):
        return ("f", x.hex())  # -0.0 and 0.0 are different fill values
    return (type(x).__name__, x)


@dataclass
class _Fill:
    attrs: dict
    out_type: object
    values: list[Value] = field(default_factory=list)


@dataclass
class _Draw:
    dtype: str
    values: list[Value] = field(default_factory=list)
    ops: list[tuple] = field(default_factory=list)  # (op type, seed, shape, attrs)
    size: int = 0


@dataclass
class _Plan:
    fills: list[_Fill]
    draws: list[_Draw]
    rest: list[Op]
    rest_state: list[Value]  # scope variables the remainder reads
    rest_given: list[Value]  # grouped values the remainder reads
    rest_outputs: list[Value]  # final versions the remainder computes
    outputs: list[Value]  # every final version the program writes
    grouped: int = 0  # ops grouped
    rest_fn: object = None
    declined: bool = False  # the remainder checks data: run the whole program as before


def _single_out(graph: Graph, op: Op) -> Value | None:
    """The op's one output when it reads nothing and writes one dense value."""
    if any(graph.op_inputs(op).values()):
        return None
    outs = graph.op_outputs(op)
    if list(outs) != ["Out"] or len(outs["Out"]) != 1 or outs["Out"][0].type.sparse:
        return None
    out = outs["Out"][0]
    return out if all(d >= 0 for d in out.type.shape) else None


def _same_dtype(attr, dtype: str) -> bool:
    try:
        return np.dtype(attr) == np.dtype(dtype)
    except TypeError:
        return False


def _groupable(graph: Graph, op: Op, flat: bool) -> Value | None:
    """The output of an op that can be grouped."""
    out = _single_out(graph, op)
    if out is None or op.type == "fill_constant":
        return out
    # a row_keyed initializer (a distributed table) draws row by row: its own rule
    if not flat or op.type not in RANDOM_INITIALISERS or not is_float(out.type.dtype) or \
            op.attrs.get("row_keyed") or not _same_dtype(op.attrs.get("dtype"), out.type.dtype) or \
            math.prod(out.type.shape) > _CHUNK:
        return None
    return out


def _plan(graph: Graph) -> _Plan:
    fills: dict[tuple, _Fill] = {}
    draws: dict[str, list[_Draw]] = {}
    rest: list[Op] = []
    flat = flat_draws_supported()
    ops = graph.ops()
    outs = {op: _groupable(graph, op, flat) for op in ops}
    # An initialiser that an ungrouped op computes with stays in that op's computation: in
    # one XLA computation, XLA folds the initialiser's constants into the op's (a scale of
    # a gaussian becomes one product), which changes the last bit; exact copies need not.
    for op in ops:
        if outs[op] is None and op.type not in _EXACT_COPIES:
            for vals in graph.op_inputs(op).values():
                for v in vals:
                    producer = graph.producer(v)
                    if producer is not None:
                        outs[producer] = None
    for op in ops:
        out = outs[op]
        if out is not None and op.type == "fill_constant":
            key = (_frozen(op.attrs), out.type)
            fills.setdefault(key, _Fill(op.attrs, out.type)).values.append(out)
            continue
        if out is None:
            rest.append(op)
            continue
        size = math.prod(out.type.shape)
        # the key its rule draws from: its own seed attribute, else the program's rule
        seed = int(op.attrs.get("seed", 0) or 0) or op_seed(graph, op)
        chunks = draws.setdefault(out.type.dtype, [])
        if not chunks or chunks[-1].size + size > _CHUNK:
            chunks.append(_Draw(out.type.dtype))
        chunks[-1].values.append(out)
        chunks[-1].ops.append((op.type, seed, tuple(out.type.shape), op.attrs))
        chunks[-1].size += size
    grouped = {v for f in fills.values() for v in f.values}
    grouped.update(v for chunks in draws.values() for d in chunks for v in d.values)
    read = {v for op in rest for vals in graph.op_inputs(op).values() for v in vals}
    made = {v for op in rest for v in op.output_values()}
    inputs = set(graph.inputs)
    return _Plan(list(fills.values()), [d for chunks in draws.values() for d in chunks], rest,
                 rest_state=sorted((v for v in read if v in inputs), key=lambda v: v.name),
                 rest_given=sorted((v for v in read if v in grouped), key=lambda v: v.name),
                 rest_outputs=[v for v in graph.outputs if v in made],
                 outputs=list(graph.outputs), grouped=len(grouped))


def _rest_fn(graph: Graph, plan: _Plan, services):
    ops, state, given, outs = plan.rest, plan.rest_state, plan.rest_given, plan.rest_outputs

    def rest(state_arrays, given_arrays, step):
        env = dict(zip(state, state_arrays))
        env.update(zip(given, given_arrays))
        # the executor's host services, as its steps give them (a trainer's recv ops)
        with collecting() as reports, services_in_effect(services):
            evaluate(graph, env, step, None, ops=ops)
        if reports:  # data checks need the step machinery: the caller falls back
            raise _HasChecks
        return tuple(env[v] for v in outs)

    return jax.jit(rest)


class _HasChecks(Exception):
    pass


def _grouped_values(plan: _Plan, step: int) -> dict[Value, object]:
    env: dict[Value, object] = {}
    host: list[tuple[Value, np.ndarray]] = []
    for fill in plan.fills:
        host.extend(zip(fill.values, fill_constants(fill.attrs, fill.out_type,
                                                    len(fill.values))))
    for draw in plan.draws:
        host.extend(zip(draw.values, draw_random(draw.dtype, draw.ops, step)))
    # One transfer per value: each becomes its own buffer (steps donate them one by one).
    env.update(zip([v for v, _ in host], jax.device_put([a for _, a in host])))
    return env


def run_grouped_startup(exe, program, scope) -> bool:
    """Run ``program`` (no feeds, no fetches, one device) grouped into ``scope``; False when
    it is not a startup program (fewer ops to group than others: a main program run without
    feeds), or cannot run grouped, and the executor runs it whole."""
    if not _GROUPED.get():
        return False
    prep = exe._prepare(program)
    plan = getattr(prep, "startup_plan", None)
    if plan is None:
        plan = prep.startup_plan = _plan(prep.graph)
    if plan.declined or prep.read_feeds or plan.grouped <= len(plan.rest):
        return False  # not a startup program: nothing (or too little) to group
    step = scope.run_count(program)
    ensure_compilation_cache()
    with contextlib.ExitStack() as stack:
        if not exe._on_default_device:
            stack.enter_context(jax.default_device(exe._device))
        env = _grouped_values(plan, step)
        if plan.rest:
            try:
                state = scope.gather([v.var.name for v in plan.rest_state])
            except KeyError as exc:
                raise GraphcError(f"variable {exc} is not initialised in the scope; the "
                                  "startup program reads it") from None
            if plan.rest_fn is None:
                plan.rest_fn = _rest_fn(prep.graph, plan, exe.services)
            try:
                made = plan.rest_fn(tuple(state), tuple(env[v] for v in plan.rest_given), step)
            except _HasChecks:
                plan.declined = True
                return False
            env.update(zip(plan.rest_outputs, made))
    # Only now, with every value computed, does the scope change (as after a step).
    made = [v for v in plan.outputs if v in env]
    scope.commit_new([v.var.name for v in made], [env[v] for v in made])
    if scope.has_shards():  # written whole
        scope.set_shards([(v.var.name, None) for v in made])
    scope.set_run_count(program, step + 1)
    return True
