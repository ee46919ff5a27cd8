"""State stacking for roll-repeated-layers: the k per-layer parameters (and accumulators) a
rolled run stacks and unstacks every step become one persistable ``<first>@STACK<k>`` variable.

A family qualifies when one ``stack`` (axis 0) reads the initial versions of k distinct
persistables of one type, none fetched or kept by name (fold_stacks has already pointed every
other stack of the same rows at it; an unrolled op that reads a member, the first layer's
backward, reads a ``slice`` row of the stacked variable instead), and either no member is
written (a read-only family) or their final versions are, in the same order, all the outputs
of one ``unstack`` of a scan_layers ``Ys`` output that nothing else reads: that output
becomes the stacked variable's last version (through an ``assign``, which XLA elides). The
stacked variable's VarInfo records its members in order (``extra["stack_of"]``, printed
``stack_of=[...]``); runtimes and the interpreter hold and answer state by the members'
Paddle names (runtime/stacked_state.py).
"""

from __future__ import annotations

from ...ir.graph import Graph, Op, VarInfo
from ..infra.base import PassContext

STACK_SUFFIX = "@STACK"


def _stack_name(members: list[str]) -> str:
    return f"{members[0]}{STACK_SUFFIX}{len(members)}"


def _family(graph: Graph, ctx: PassContext, op: Op):
    """(members, unstack op or None) for a stack op that can become stacked state, or
    (None, reason) / (None, None) when it is no state stack at all."""
    xs = op.inputs.get("X", [])
    if op.attrs["axis"] != 0 or not xs or any(graph.producer(v) is not None for v in xs):
        return None, None
    if not all(v.var.persistable for v in xs):
        return None, None
    names = [v.var.name for v in xs]
    if len(set(names)) != len(names):
        return None, "a state stack reads one variable twice"
    if any(v.type != xs[0].type or v.var.shard is not None for v in xs):
        return None, "stacked state members differ in type or are sharded"
    for v in xs:
        if v in ctx.keep or graph.is_output(v) and graph.latest(v.var.name) is not v:
            return None, f"state '{v.var.name}' is fetched or kept by name"
    finals = [graph.latest(n) for n in names]
    if all(f is x for f, x in zip(finals, xs)):
        return names, None  # read-only: every member's last version is its input
    unstack = graph.producer(finals[0])
    if unstack is None or unstack.type != "unstack" or unstack.attrs["axis"] != 0 \
            or list(unstack.outputs.get("Y", [])) != finals:
        return None, f"state '{names[0]}' is not updated by one rolled optimizer run in order"
    for f in finals:
        if graph.user_ops(f) or f in ctx.keep or not graph.is_output(f):
            return None, f"updated state '{f.var.name}' is read after the rolled run"
    scan = graph.producer(unstack.input("X"))
    if scan is None or scan.type != "scan_layers":
        return None, f"state '{names[0]}' is updated outside a scan"
    return names, unstack


def stack_state(graph: Graph, ctx: PassContext) -> None:
    """Replace each qualifying family by one stacked persistable (see the module doc)."""
    rw = ctx.rewriter
    outputs, dropped = list(graph.outputs), set()  # what the graph returns, once done
    retired: list[Op] = []
    for op in list(graph.ops()):
        if op.type != "stack":
            continue
        members, unstack = _family(graph, ctx, op)
        if members is None:
            if unstack is not None:  # here: why the family stays separate
                ctx.decline(unstack)
            continue
        name = _stack_name(members)
        if name in graph.vars:
            ctx.decline(f"'{name}' already exists")
            continue
        first = op.inputs["X"][0].var
        info = VarInfo(name, first.kind, first.stop_gradient, first.trainable,
                       first.learning_rate, extra={"stack_of": tuple(members)})
        stacked_in = rw.value_of(info, 0, op.output("Y").type)
        rw.add_graph_input(stacked_in)
        xs = list(op.inputs["X"])
        if any(map(graph.is_output, xs)):  # a read-only family the graph returns as is
            members_in = set(xs)
            outputs = [o for o in outputs if o not in members_in] + [stacked_in]
        rw.replace_all_uses(op.output("Y"), stacked_in)
        rw.erase_op(op)
        for r, v in enumerate(xs):
            if graph.user_ops(v):  # an unrolled op (the first layer's) reads row r
                row = rw.create_op("slice", {"Input": stacked_in}, {"Out": f"{v.var.name}.row"},
                                   {"axes": [0], "starts": [r], "ends": [r + 1],
                                    "decrease_axis": [0]}, after=graph.user_ops(v)[0],
                                   role=graph.user_ops(v)[0].role).output("Out")
                rw.replace_all_uses(v, row)
            if graph.is_output(v):  # (read-only) the stacked input is returned instead
                rw.set_outputs([o for o in graph.outputs if o not in members_in])
            rw.erase_value(v)
        if unstack is not None:
            # the scan's stacked output becomes the stacked variable's last version (an
            # assign, which XLA elides, keeps the scan's own outputs as they are)
            rw.create_op("assign", {"X": unstack.input("X")}, {"Out": rw.new_version(
                stacked_in)}, after=unstack, role=unstack.role)
            final = graph.latest(name)
            dropped.update(unstack.outputs["Y"])
            outputs.append(final)
            retired.append(unstack)
        ctx.count("stacked state families")
        ctx.count("stacked state members", len(members))
    if outputs != graph.outputs or dropped:
        rw.set_outputs([v for v in outputs if v not in dropped])
    for unstack in retired:
        rw.erase_op(unstack)  # its outputs are no graph outputs any more
