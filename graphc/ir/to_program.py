"""Graph -> Program: SSA values map back to variable names, renaming only where two versions
of one variable are live at once (a pass moved a write past a read)."""

from __future__ import annotations

from .graph import Graph, Value
from .program import Parameter, Program, Variable


def graph_to_program(graph: Graph) -> Program:
    prog = Program()
    prog.random_seed = graph.random_seed
    block = prog.global_block()
    order = graph.ops()
    position = {op: i for i, op in enumerate(order)}

    def last_use(v: Value) -> int:
        return max((position[u] for u in graph.nx.succ[v]), default=-1)

    # Walk the ops in order; the variable name of a new version is free once every reader
    # of the version holding it comes at or before the writing op.
    holder: dict[str, tuple[Value, int]] = {}  # var name -> (value holding it, its last use)
    names: dict[Value, str] = {}
    fresh = 0

    def declare(v: Value, name: str) -> None:
        if name in block.vars:
            return
        info = v.var
        if name == info.name and info.kind == "param":
            p = Parameter(block, name, v.type.shape, v.type.dtype, trainable=info.trainable,
                          learning_rate=info.learning_rate,
                          regularizer=info.extra.get("regularizer"))
            p.stop_gradient = info.stop_gradient
            block.vars[name] = p
        else:
            same = name == info.name
            block.vars[name] = Variable(
                block, name=name, shape=v.type.shape, dtype=v.type.dtype,
                persistable=same and info.persistable, stop_gradient=info.stop_gradient,
                is_data=same and info.kind == "feed", need_check_feed=same and info.kind == "feed",
                lod_level=v.type.lod_level, selected_rows=v.type.sparse)
            # a tensor array (of LoD values: their level) stays one
            block.vars[name]._set_type(array=v.type.array, element_lod=v.type.element_lod)

    def assign(v: Value, at: int) -> None:
        nonlocal fresh
        base = v.var.name
        held = holder.get(base)
        if held is None or held[1] <= at:
            name = base
        else:
            fresh += 1
            name = f"{base}.ssa_{fresh}"
            while graph.vars.get(name) or name in block.vars:
                fresh += 1
                name = f"{base}.ssa_{fresh}"
        names[v] = name
        if name == base:
            holder[base] = (v, last_use(v))
        declare(v, name)

    for v in graph.inputs:
        assign(v, -1)
    from .program import Operator
    for op in order:
        i = position[op]
        for v in op.output_values():
            assign(v, i)
        ins = {s: [names[v] for v in vs] for s, vs in graph.op_inputs(op).items()}
        outs = {s: [names[v] for v in vs] for s, vs in graph.op_outputs(op).items()}
        block.ops.append(Operator(block, op.type, ins, outs, dict(op.attrs), op.source, op.role))
    # A persistable whose last version had to be renamed is copied back under its own name.
    for v in graph.outputs:
        if names[v] != v.var.name:
            declare(v, v.var.name)
            block.ops.append(Operator(block, "assign", {"X": [names[v]]},
                                      {"Out": [v.var.name]}, {}, None, "forward"))
    prog._bump()
    return prog
