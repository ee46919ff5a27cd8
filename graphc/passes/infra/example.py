"""Patterns written by example: trace a small Fluid function with the builder and read a
Pattern, and optionally its replacement, off the ops it appended (as torch.fx's subgraph
rewriter does).

Nodes are named by op type (``relu``), numbered in program order when a type repeats
(``relu_0``, ``relu_1``); values by the function's parameter names, ``out`` (``out0``,
``out1``, ... for several results) and ``<node>_<slot>`` for intermediates. Every
intermediate must be read by the pattern alone (``intermediate has N users`` / ``is
fetched``), the ops must share a role and have no control dependencies, and outputs the
example does not use must be unread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from ...ir.graph import Graph, Op, Value, lower
from .base import PassContext, PassError
from .guards import Check, NoControlDeps, OnlyReadBy, SameRole
from .pattern import Match, Node, Pattern

InputSpec = Mapping[str, tuple[Sequence[int], str]]


def trace(fn: Callable, inputs: InputSpec) -> tuple[Graph, list[Value], list[Value]]:
    """(graph, input values, result values) of ``fn(*inputs)`` built into a fresh program;
    ``inputs`` maps each parameter name to (shape, dtype)."""
    from ...ir import unique_name
    from ...ir.default_programs import program_guard
    from ...ir.program import Program

    main = Program()
    with program_guard(main, Program()), unique_name.guard():
        block = main.global_block()
        args = [block.create_var(name=n, shape=list(shape), dtype=dtype, is_data=True)
                for n, (shape, dtype) in inputs.items()]
        result = fn(*args)
    results = list(result) if isinstance(result, list | tuple) else [result]
    graph = lower(main)
    return graph, [graph.value(n) for n in inputs], [graph.latest(v.name) for v in results]


def pattern_from_example(fn: Callable, inputs: InputSpec, *, name: str,
                         replacement: Callable | None = None,
                         rewrite: Callable[[Match, PassContext], None] | None = None,
                         guards: Sequence = (), stat: str | None = None) -> Pattern:
    """A Pattern matching what ``fn`` builds. ``replacement`` (same parameters, same number
    of results) is traced too and instantiated in place of each match, its results defining
    the matched results' values (names kept); or ``rewrite(match, ctx)`` edits by hand.
    ``guards`` run after the ones every example pattern has."""
    if (replacement is None) == (rewrite is None):
        raise PassError(f"pattern {name!r}: give exactly one of replacement and rewrite")
    graph, ins, outs = trace(fn, inputs)
    value_names = {v: n for v, n in zip(ins, inputs)}
    value_names.update({v: "out" if len(outs) == 1 else f"out{i}" for i, v in enumerate(outs)})
    op_names = _op_names(graph.ops())
    for op in graph.ops():
        for slot, vals in op.outputs.items():
            for v in vals:
                value_names.setdefault(v, f"{op_names[op]}_{slot}")
    for v in graph.inputs:  # parameters the example created: bound to whatever is there
        value_names.setdefault(v, v.var.name.replace(".", "_"))
    nodes = _nodes(graph, outs, op_names, value_names)
    node_names = tuple(n.name for n in nodes)
    inner = [v for v, n in value_names.items() if graph.producer(v) is not None
             and v not in outs]
    auto = [OnlyReadBy(value_names[v], tuple((op_names[op], slot)
                                             for op, slot, _ in graph.users(v)))
            for v in inner]
    auto += [SameRole(node_names),
             NoControlDeps(node_names, tuple(value_names[v] for v in inner)),
             Check(_unused_outputs_unread(nodes))]
    if replacement is not None:
        rewrite = _replacer(name, replacement, inputs, list(value_names[v] for v in outs),
                            node_names)
    return Pattern(name, nodes, (*auto, *guards), rewrite, stat)


def _op_names(ops: list[Op]) -> dict[Op, str]:
    counts: dict[str, int] = {}
    for op in ops:
        counts[op.type] = counts.get(op.type, 0) + 1
    seen: dict[str, int] = {}
    names = {}
    for op in ops:
        if counts[op.type] == 1:
            names[op] = op.type
        else:
            names[op] = f"{op.type}_{seen.get(op.type, 0)}"
            seen[op.type] = seen.get(op.type, 0) + 1
    return names


def _nodes(graph: Graph, outs: list[Value], op_names: dict, value_names: dict) -> tuple:
    """Nodes from the op producing the first result outwards, each linked to earlier ones."""
    root = graph.producer(outs[0])
    if root is None:
        raise PassError("an example pattern must compute its result (it returned an input)")
    order, queue = [root], [root]
    while queue:
        op = queue.pop(0)
        near = [graph.producer(v) for v in op.input_values()]
        near += [u for v in op.output_values() for u in graph.user_ops(v)]
        for other in near:
            if other is not None and other not in order:
                order.append(other)
                queue.append(other)
    if len(order) != graph.num_ops:
        raise PassError("an example pattern's ops must be connected")
    return tuple(Node(op_names[op], op.type,
                      ins={s: value_names[vs[0]] for s, vs in op.inputs.items()},
                      outs={s: value_names[vs[0]] for s, vs in op.outputs.items()})
                 for op in order)


def _unused_outputs_unread(nodes: tuple[Node, ...]):
    def check(m: Match, ctx: PassContext) -> str | None:
        for node in nodes:
            op = m[node.name]
            for slot, vals in op.outputs.items():
                if slot in node.outs:
                    continue
                for v in vals:
                    if ctx.graph.has_users(v) or v in ctx.keep or ctx.graph.is_output(v):
                        return f"{op.type} output {slot} is read outside the pattern"
        return None
    return check


def _replacer(name: str, fn: Callable, inputs: InputSpec, out_names: list[str],
              node_names: tuple[str, ...]):
    rgraph, rins, routs = trace(fn, inputs)
    if len(routs) != len(out_names):
        raise PassError(f"pattern {name!r}: the replacement returns {len(routs)} values, "
                         f"the pattern {len(out_names)}")
    if any(rgraph.producer(v) is None for v in routs):
        raise PassError(f"pattern {name!r}: the replacement must compute every result")
    arg_names = dict(zip(rins, inputs))
    result_names = dict(zip(routs, out_names))
    if any(v not in arg_names and rgraph.has_users(v) for v in rgraph.inputs):
        raise PassError(f"pattern {name!r}: the replacement may read only its parameters")

    def rewrite(m: Match, ctx: PassContext) -> None:
        rw, graph = ctx.rewriter, ctx.graph
        position = {op: i for i, op in enumerate(graph.ops())}
        matched = sorted(m.ops(*node_names), key=position.__getitem__)
        kept = {m[n] for n in out_names}
        dropped = [v for op in matched for v in graph.values_defined_by(op) if v not in kept]
        for op in reversed(matched):  # readers first
            rw.erase_op(op, erase_outputs=False)
        for v in dropped:
            rw.erase_value(v)
        env: dict[Value, Value] = {v: m[n] for v, n in arg_names.items()}
        hint = m[out_names[0]].var.name
        for op in rgraph.ops():
            ins = {s: [env[v] for v in vs] for s, vs in op.inputs.items()}
            outs = {s: [m[result_names[v]] if v in result_names else f"{hint}.{op.type}"
                        for v in vs] for s, vs in op.outputs.items()}
            new = rw.create_op(op.type, ins, outs, dict(op.attrs), derived_from=matched)
            for s, vs in op.outputs.items():
                env.update(zip(vs, new.outputs[s]))
    return rewrite
