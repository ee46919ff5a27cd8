"""Structural equality of graphs: a key that two graphs share exactly when they print the
same (names, types, attributes, edges; source lines optionally)."""

from __future__ import annotations

from typing import Any

from ..graph import Graph, VarInfo

# ------------------------------------------------------------------ structural equality


def _tagged(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return ("list", tuple(_tagged(v) for v in value))
    return (type(value).__name__, value)


def structural_key(g: Graph, check_source: bool = False) -> tuple:
    """Everything that defines a graph, independent of node identity and insertion order."""

    def var_key(v: VarInfo) -> tuple:
        return (v.name, v.kind, v.stop_gradient, v.trainable, v.learning_rate, v.lod_level,
                v.shard, v.extra.get("stack_of"))

    ops = []
    for op in g.ops():
        ins = tuple((s, tuple(v.name for v in vs)) for s, vs in g.op_inputs(op).items())
        outs = tuple((s, tuple((v.name, v.type) for v in vs))
                     for s, vs in g.op_outputs(op).items())
        attrs = tuple(sorted((k, _tagged(v)) for k, v in op.attrs.items()))
        ops.append((op.type, op.role, op.source if check_source else None, attrs, ins, outs))
    return (g.name, g.random_seed,
            tuple((v.name, v.type) for v in g.inputs), tuple(ops),
            tuple(v.name for v in g.outputs),
            tuple(sorted(var_key(v) for v in g.vars.values())))
