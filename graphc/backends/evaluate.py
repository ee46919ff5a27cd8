"""Walk a graph's ops in order, applying each op's lowering rule to an environment of arrays.

The interpreter calls it eagerly; the JAX emitter calls it while tracing one jitted step.
"""

from __future__ import annotations

import math
import weakref

import jax

from ..ir.errors import GraphcError
from ..ir.grad_defs import forward_type
from ..ir.graph import Graph, Op, Value
from ..ir.opdef import RANDOM, get_op_def
from ..ir.shape_values import FOLDABLE
from ..ops import import_lowerings
from .compiled_rules import current_rule_cache
from .lod import LoDArray
from .lowering import (
    LoweringError,
    Replicas,
    apply_cross_replica,
    apply_rule,
    forward_stash,
    is_cross_replica,
    random_op_seed,
)
from .precision import at_graphc_precision, with_graphc_x64
from .selected_rows import SelectedRows
from .threefry import shared_keys
from .traced_rules import apply_traced_once

import_lowerings()  # every family's rules are registered before the first op is walked

# graph -> (graph version, {op id: position among the graph's random ops})
# cache: random-op positions per graph version
_POSITIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def random_op_positions(graph: Graph) -> dict[int, int]:
    """Each random op's index among the graph's ops with the RANDOM trait, by program order.

    Program order is the op's ``seq`` (its index in the Program it was lowered from); ops a
    pass rebuilds from another inherit its ``seq`` as their prefix, so positions survive
    passes (none of graphc's passes adds, drops or reorders a random op that is used)."""
    cached = _POSITIONS.get(graph)
    if cached is not None and cached[0] == graph._version:
        return cached[1]
    randoms = sorted((op for op in graph.ops_by_id.values()
                      if get_op_def(op.type, op.where).has_trait(RANDOM)),
                     key=lambda op: (op.seq, op.id))
    positions = {op.id: i for i, op in enumerate(randoms)}
    _POSITIONS[graph] = (graph._version, positions)
    return positions


def op_seed(graph: Graph, op: Op) -> int:
    """The seed ``op`` draws from when it has no ``seed`` attribute of its own
    (``random_op_seed`` states the rule; the attribute is applied by ``RuleContext.rng``)."""
    name = op.random_stream_key()
    position = random_op_positions(graph).get(op.id) if graph.random_seed else None
    return random_op_seed(graph.random_seed, position, name)


@with_graphc_x64  # rules make int64/float64 arrays even when called directly (tests, tools)
@at_graphc_precision  # eager ops (the interpreter's) compute products as compiled steps do
def evaluate_op(graph: Graph, op: Op, env: dict[Value, object], step=0, replicas=None) -> None:
    ins = {slot: [env[v] for v in vals] for slot, vals in graph.op_inputs(op).items()}
    outs = graph.op_outputs(op)
    out_types = {slot: [v.type for v in vals] for slot, vals in outs.items()}
    try:
        if _host_value(op, ins):  # a shape tensor: a host value while tracing
            with jax.ensure_compile_time_eval():
                results = apply_rule(op.type, op.attrs, ins, out_types, op.where,
                                     op_seed(graph, op), step, replicas)
        else:
            seed, cache = op_seed(graph, op), current_rule_cache()
            # the interpreter's compiled rule (backends/compiled_rules.py); None: run eagerly
            results = None if cache is None else cache.apply(
                op.type, op.attrs, ins, out_types, op.where, seed, step, replicas)
            if results is None and cache is None and replicas is None:
                # a step's trace: ops alike share one trace of their rule (traced_rules.py)
                results = apply_traced_once(op.type, op.attrs, ins, out_types, op.where)
            if results is None:
                results = apply_rule(op.type, op.attrs, ins, out_types, op.where, seed, step,
                                     replicas)
    except GraphcError:
        raise
    except Exception as exc:  # a rule failed: say which op, as torch.fx's Interpreter does
        raise LoweringError(f"while executing {op.where}: {type(exc).__name__}: {exc}") from exc
    _store(op, outs, results, env)


def _host_value(op: Op, ins: dict[str, list]) -> bool:
    """Shape tensors are folded on the host (ir/shape_values.py): ``shape`` always, and the
    ops of FOLDABLE over small host values (only these: a big constant would be folded into
    the compiled step)."""
    if op.type not in FOLDABLE:
        return False
    if op.type == "shape":
        return True
    vals = [v for vs in ins.values() for v in vs]
    if op.type == "fill_constant" and vals:  # sized by a shape tensor: a batch, no dim
        return False
    if not vals:  # fill_constant / assign_value: a small integer constant (a dim)
        dtype = str(op.attrs.get("dtype", ""))
        return dtype.startswith("int") and math.prod(op.attrs.get("shape") or [0]) <= 64
    return all(not isinstance(v, jax.core.Tracer | LoDArray | SelectedRows)
               and getattr(v, "size", 65) <= 64 for v in vals)


def _store(op: Op, outs: dict[str, list[Value]], results: dict[str, list], env: dict) -> None:
    for slot, vals in outs.items():
        for v, arr in zip(vals, results[slot]):
            if isinstance(arr, LoDArray) != bool(v.type.lod_level):  # docs/lod.md's recipe
                raise LoweringError(f"{op.where}: output %{v.name} is {v.type} but the rule "
                                    f"produced a {type(arr).__name__}")
            if isinstance(arr, SelectedRows) != v.type.sparse:
                raise LoweringError(f"{op.where}: output %{v.name} is {v.type} but the rule "
                                    f"produced a {type(arr).__name__}")
            if v.type.sparse:
                _check_rows(op, v, arr)
            elif tuple(arr.shape) != tuple(d if d >= 0 else arr.shape[i]
                                           for i, d in enumerate(v.type.shape)):
                raise LoweringError(f"{op.where}: output %{v.name} has shape {list(arr.shape)} "
                                    f"but the IR says {list(v.type.shape)}")
            env[v] = arr


def _check_rows(op: Op, v: Value, sr: SelectedRows) -> None:
    rows, values = sr.rows, sr.values
    if (sr.height != v.type.shape[0] or tuple(values.shape[1:]) != v.type.shape[1:]
            or rows.ndim != 1 or values.shape[:1] != rows.shape):
        raise LoweringError(f"{op.where}: output %{v.name} holds {rows.shape[0]} rows of "
                            f"{list(values.shape[1:])} (height {sr.height}, rows "
                            f"{list(rows.shape)}) but the IR says {v.type}")


@with_graphc_x64
def evaluate_replicas(graph: Graph, envs: list[dict[Value, object]], replicas: Replicas,
                      step=0) -> list[dict[Value, object]]:
    """``evaluate`` on simulated replicas, in lock step: ``envs[r]`` is replica r's values.
    Ops whose result depends on other replicas (collectives) run once over all of them with
    their cross-replica rule; every other op runs on each replica with its own index."""
    for op in graph.ops():
        if not is_cross_replica(op.type):
            for r, env in enumerate(envs):
                evaluate_op(graph, op, env, step, replicas.at(r))
            continue
        ins = [{slot: [env[v] for v in vals] for slot, vals in graph.op_inputs(op).items()}
               for env in envs]
        outs = graph.op_outputs(op)
        out_types = {slot: [v.type for v in vals] for slot, vals in outs.items()}
        try:
            results = apply_cross_replica(op.type, op.attrs, ins, out_types, op.where,
                                          replicas, op_seed(graph, op), step)
        except GraphcError:
            raise
        except Exception as exc:
            raise LoweringError(f"while executing {op.where} across {replicas.nranks} "
                                f"replicas: {type(exc).__name__}: {exc}") from exc
        for env, result in zip(envs, results):
            _store(op, outs, result, env)
    return envs


def evaluate(graph: Graph, env: dict[Value, object], step=0, replicas=None,
             ops: list[Op] | None = None) -> dict[Value, object]:
    ops = graph.ops() if ops is None else ops
    # a forward rule's leavings reach its grad op in the same walk; the random ops' keys
    # are made at once
    with forward_stash(), step_keys(graph, ops, step):
        for op in ops:
            evaluate_op(graph, op, env, step, replicas)
    return env


def step_keys(graph: Graph, ops, step):
    """A block in which the random ops among ``ops`` that draw from their derived seed
    (``op_seed``) find their keys for ``step`` made by one vectorised hash
    (``threefry.shared_keys``): the same keys, one computation instead of one per op."""
    seeds = [op_seed(graph, op) for op in ops
             if any(t is not None and get_op_def(t).has_trait(RANDOM)
                    for t in (op.type, forward_type(op.type)))]
    return shared_keys(seeds, step)
