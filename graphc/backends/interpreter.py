"""The reference interpreter: runs a graph op by op, eagerly, with each op's lowering rule.

It is the oracle every pass is tested against: no whole-graph compilation, no fusion.
"""

from __future__ import annotations

from collections.abc import Iterable

import jax.numpy as jnp
import numpy as np

from ..ir.errors import GraphcError
from ..ir.graph import Graph, Value
from .evaluate import evaluate


class InterpreterError(GraphcError):
    """Missing inputs or unknown fetch targets for an interpreter run."""


def resolve_fetch(graph: Graph, target) -> Value:
    """A fetch target (Value, SSA name, or variable name = its last version) as a Value."""
    if isinstance(target, Value):
        return target
    name = getattr(target, "name", target)
    if name in graph.values and "#" in name:
        return graph.values[name]
    try:
        return graph.latest(name)
    except GraphcError:
        raise InterpreterError(f"cannot fetch '{name}': no op of the program computes it and "
                               "it is not an input") from None


def bind_inputs(graph: Graph, state: dict, feeds: dict) -> dict[Value, object]:
    env = {}
    for v in graph.inputs:
        source = feeds if v.var.kind == "feed" else state
        if v.var.name not in source:
            if v.var.kind == "feed" and not graph.nx.succ[v]:
                continue  # declared but unused feed
            what = "feed" if v.var.kind == "feed" else "state variable"
            raise InterpreterError(f"missing {what} '{v.var.name}' ({v.type})")
        env[v] = jnp.asarray(source[v.var.name])
    return env


def run_graph(graph: Graph, state: dict | None = None, feeds: dict | None = None,
              fetch: Iterable = (), step: int = 0):
    """Run once. Returns (new state {var: array} for every graph output, [fetched arrays])."""
    fetch_values = [resolve_fetch(graph, f) for f in fetch]
    env = bind_inputs(graph, state or {}, feeds or {})
    evaluate(graph, env, step)
    new_state = {v.var.name: np.asarray(env[v]) for v in graph.outputs}
    return new_state, [np.asarray(env[v]) for v in fetch_values]
