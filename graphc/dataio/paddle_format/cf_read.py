"""Paddle's conditional_block / select_input and recurrent sub-blocks read into graphc's region
ops (cond, switch_case, recurrent), replayed through the layers that build them."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...ir.errors import GraphcError

# ops graphc never builds itself: they exist only in Paddle's block structure
TRANSLATED = frozenset({"conditional_block", "select_input", "recurrent", "rnn_memory_helper"})


@dataclass
class Group:
    """conditional_blocks whose results one or more select_input ops choose between: ``cbs``
    the op index giving each of select_input's X positions; ``kind`` 'cond' (Paddle's cond:
    Mask = cast(pred), X[1] under pred, X[0] under logical_not(pred)) or 'switch' (X[k] under
    equal(Mask, k), as graphc writes case/switch_case); ``control`` pred or Mask."""

    cbs: list[int]
    kind: str
    control: str
    selects: list[int] = field(default_factory=list)  # select_input op indices, in order


@dataclass
class Plan:
    groups: dict[int, Group]  # op index of a group's last conditional_block -> the group
    member: set[int]  # conditional_blocks built by a group (not on their own)
    deferred: set[str]  # the groups' branch results: variables local to their branch
    select_of: dict[int, Group]  # select_input op index -> its group


def _slot(op, name: str, outputs: bool = False) -> list[str]:
    return next((list(v.arguments) for v in (op.outputs if outputs else op.inputs)
                 if v.parameter == name), [])


def attr(op, name: str, default=None):
    """Attribute ``name`` of the OpDesc ``op`` (a block attribute: its block index)."""
    from .program_desc import _READ, _T
    for a in op.attrs:
        if a.name == name:
            if a.type == _T["BLOCK"]:
                return a.block_idx
            field = _READ.get(a.type)
            if field is None:
                return default
            value = getattr(a, field)
            return list(value) if not isinstance(value, bool | int | float | str) else value
    return default


def _const(ops, producer: dict, name: str):
    """The value of a one-element fill_constant producing ``name``, else None."""
    i = producer.get(name)
    if i is None or ops[i].type != "fill_constant" or list(attr(ops[i], "shape", []) or [1]) \
            not in ([1], []):
        return None
    a = next((a for a in ops[i].attrs if a.name == "value"), None)
    return None if a is None else a.f


def plan(ops, where: str) -> Plan:
    """Which conditional_blocks of ``ops`` a select_input chooses between, and how."""
    from .program_desc import ProgramDescError
    producer: dict[str, int] = {}
    for i, op in enumerate(ops):
        for v in op.outputs:
            for n in v.arguments:
                producer.setdefault(n, i)
    groups: dict[tuple, Group] = {}
    select_of: dict[int, Group] = {}
    for i, op in enumerate(ops):
        if op.type != "select_input":
            continue
        xs, mask = _slot(op, "X"), _slot(op, "Mask")
        cbs = [producer.get(x) for x in xs]
        why = _why_not(ops, producer, cbs, mask)
        if why:
            raise ProgramDescError(f"{where}: op #{i} 'select_input' (Out {_slot(op, 'Out', True)}"
                                   f") {why}; graphc has no select_input of its own and reads "
                                   "it only as the merge of Paddle's cond")
        kind = "cond" if len(cbs) == 2 and ops[producer[mask[0]]].type == "cast" else "switch"
        control = _slot(ops[producer[mask[0]]], "X")[0] if kind == "cond" else mask[0]
        group = groups.setdefault(tuple(cbs), Group(cbs, kind, control))
        group.selects.append(i)
        select_of[i] = group
    deferred = {_slot(ops[i], "X")[k] for g in groups.values() for i in g.selects
                for k in range(len(g.cbs))}
    return Plan({max(g.cbs): g for g in groups.values()}, {c for g in groups.values()
                                                            for c in g.cbs},
                deferred, select_of)


def _why_not(ops, producer, cbs, mask) -> str | None:
    """Why select_input over the writers ``cbs`` with ``mask`` is not a cond graphc reads."""
    if len(mask) != 1 or producer.get(mask[0]) is None:
        return "has no Mask computed in its block"
    if any(c is None or ops[c].type != "conditional_block" for c in cbs) or len(set(cbs)) != \
            len(cbs) or len(cbs) < 2:
        return "chooses between values not each written by a conditional_block of its own"
    m = ops[producer[mask[0]]]
    if m.type == "cast" and len(cbs) == 2:
        pred = _slot(m, "X")[0]
        neg = producer.get(_slot(ops[cbs[0]], "Cond")[0])
        if _slot(ops[cbs[1]], "Cond") == [pred] and neg is not None and \
                ops[neg].type == "logical_not" and _slot(ops[neg], "X") == [pred]:
            return None
        return ("chooses by cast(pred) between conditional_blocks whose conditions are not "
                "logical_not(pred) and pred")
    for k, c in enumerate(cbs):
        e = producer.get((_slot(ops[c], "Cond") or [None])[0])
        if e is None or ops[e].type != "equal" or _slot(ops[e], "X") != mask or \
                _const(ops, producer, _slot(ops[e], "Y")[0]) != k:
            return (f"chooses by Mask {mask[0]} but X[{k}]'s conditional_block does not run "
                    f"exactly when Mask == {k}")
    return None


def var_desc(desc, name: str):
    for b in desc.blocks:
        for v in b.vars:
            if v.name == name:
                return v
    return None


def create_block_vars(desc, block, index: int, feeds: set, where: str, plan_: Plan,
                      rename: dict | None = None) -> None:
    """Block ``index``'s variables that graphc's block lacks (its groups' results wait for
    their branch); with ``rename``, variables it maps are created under their new names."""
    from .program_desc import _create_var
    for var in desc.blocks[index].vars:
        name = (rename or {}).get(var.name, var.name)
        if name not in block.vars and var.name not in plan_.deferred:
            _create_var(block, var, feeds, where, name)


def append_group(ctx, ops, group: Group, plan_: Plan, rename: dict) -> None:
    """A select_input group as ONE graphc cond (Paddle's cond) or switch_case (its Mask an
    int32 index): each conditional_block's sub-block becomes a branch returning the values
    the select_inputs choose; each select_input's Out is assigned the op's result."""
    from ...layers.conditional import cond, switch_case
    from .program_desc import ProgramDescError, _create_var
    desc, program, feeds, where = ctx
    block = program.global_block()
    picks = [[_slot(ops[s], "X")[k] for s in group.selects] for k in range(len(group.cbs))]

    def branch(k):
        cb = ops[group.cbs[k]]

        def fn():
            for n in picks[k]:
                if n not in block.vars:
                    _create_var(block, var_desc(desc, n), feeds, where, rename.get(n, n))
            append_block(ctx, attr(cb, "sub_block"), rename)
            return [block.var(rename.get(n, n)) for n in picks[k]]
        return fn

    control = block.var(rename.get(group.control, group.control))
    try:
        if group.kind == "cond":
            results = cond(control, branch(1), branch(0))
        else:
            n = len(group.cbs)
            results = switch_case(control, [(k, branch(k)) for k in range(n - 1)],
                                  branch(n - 1))
    except ProgramDescError:
        raise
    except GraphcError as exc:
        raise ProgramDescError(f"{where}: the conditional_blocks of ops {group.cbs} (Paddle's "
                               f"{group.kind}) do not build in graphc: {exc}") from None
    for s, r in zip(group.selects, results):
        out = rename.get(_slot(ops[s], "Out", True)[0], _slot(ops[s], "Out", True)[0])
        block.append_op("assign", {"X": [r.name]}, {"Out": [out]})


def append_block(ctx, index: int, rename: dict) -> None:
    """Block ``index``'s variables and ops appended to graphc's block (inside a branch)."""
    from .program_desc import _append_ops
    desc, program, feeds, where = ctx
    ops = desc.blocks[index].ops
    p = plan(ops, f"{where}, block {index}")
    create_block_vars(desc, program.global_block(), index, feeds, where, p, rename)
    _append_ops(desc, program, ops, feeds, where, rename, p)


def append_conditional(ctx, op, rename: dict) -> None:
    """A conditional_block no select_input reads: Paddle's ConditionalBlock (Switch, IfElse's
    blocks), whose ops write outer variables in place: graphc's ConditionalBlock."""
    from ...layers.switch import ConditionalBlock
    from .program_desc import ProgramDescError
    desc, program, feeds, where = ctx
    block = program.global_block()
    if _ifelse_side(desc, op):  # ifelse26: a side of Paddle's IfElse runs in every step
        append_block(ctx, attr(op, "sub_block"), rename)
        return
    conds = [block.var(rename.get(n, n)) for n in _slot(op, "Cond")]
    try:
        with ConditionalBlock(conds, bool(attr(op, "is_scalar_condition", False))).block():
            append_block(ctx, attr(op, "sub_block"), rename)
    except ProgramDescError:
        raise
    except GraphcError as exc:
        raise ProgramDescError(f"{where}: the conditional_block of block "
                               f"{attr(op, 'sub_block')} does not build in graphc: {exc}") \
            from None



def _ifelse_side(desc, op) -> bool:
    """Whether ``op`` is a block of Paddle 1.8's IfElse: not a scalar condition, and every
    condition the Mask of a split_lod_tensor. Paddle runs such a block whenever the condition
    has rows (always, in a step), on the LoD values the split makes (empty when no row
    goes that way), so its ops are read as they are, with no conditional around them."""
    conds = _slot(op, "Cond")
    if attr(op, "is_scalar_condition", False) or not conds:
        return False
    masks = {n for b in desc.blocks for o in b.ops if o.type == "split_lod_tensor"
             for n in _slot(o, "Mask")}
    return set(conds) <= masks


def mark_ifelse_rows(desc) -> None:
    """Declare the values of Paddle's IfElse sides as LoD values (``lod_level`` 1): the
    split_lod_tensor outputs, what the sides' blocks compute from them and the outer
    variables they assign to. Paddle declares them without a LoD level (its sides have a
    run-time row count); graphc's sides are LoD values of static capacity."""
    rows = {n for b in desc.blocks for o in b.ops if o.type == "split_lod_tensor"
            for slot in ("OutTrue", "OutFalse") for n in _slot(o, slot, True)}
    if not rows:
        return
    sides = [attr(o, "sub_block") for b in desc.blocks for o in b.ops
             if o.type == "conditional_block" and _ifelse_side(desc, o)]
    for index in sides:
        for o in desc.blocks[index].ops:
            if rows & {n for v in o.inputs for n in v.arguments}:
                rows |= {n for v in o.outputs for n in v.arguments}
    for b in [desc.blocks[0], *(desc.blocks[i] for i in sides)]:
        for v in b.vars:
            if v.name in rows and v.type.type == _lod_tensor_kind() \
                    and not v.type.lod_tensor.lod_level:
                v.type.lod_tensor.lod_level = 1


def _lod_tensor_kind() -> int:
    from .program_desc import _LOD_TENSOR
    return _LOD_TENSOR

def append_recurrent(ctx, op, rename: dict) -> None:
    """Paddle's recurrent op (StaticRNN) as graphc's: its step-input slices and memories
    (named in the sub-block like the sequences and ``ex_states``) become the StaticRNN's step
    inputs and memories; rnn_memory_helper copies are aliases; ``states`` update the
    memories, ``outputs`` (named in the sub-block like the outer stacked values) are the
    step outputs."""
    from ...ir import unique_name
    from ...layers.static_rnn import StaticRNN
    from .program_desc import ProgramDescError, _create_var
    desc, program, feeds, where = ctx
    block = program.global_block()
    index = attr(op, "sub_block")
    if attr(op, "reverse", False):
        raise ProgramDescError(f"{where}: recurrent op of block {index} has reverse=True; "
                               "graphc's recurrent steps forward only (reverse the inputs)")
    outer = lambda n: rename.get(n, n)  # noqa: E731
    ex_states, states = attr(op, "ex_states", []) or [], attr(op, "states", []) or []
    inits, seqs = _slot(op, "initial_states"), _slot(op, "inputs")
    outs = _slot(op, "outputs", True)
    if len(ex_states) != len(inits) or len(states) != len(inits):
        raise ProgramDescError(f"{where}: recurrent op of block {index} has {len(inits)} "
                               f"initial_states, {len(ex_states)} ex_states and {len(states)} "
                               "states: not Paddle's StaticRNN layout")
    inner = dict(rename)
    try:
        rnn = StaticRNN()
        with rnn.step():
            for pre, init in zip(ex_states, inits):
                inner[pre] = rnn.memory(init=block.var(outer(init))).name
            for x in seqs:
                inner[x] = rnn.step_input(block.var(outer(x))).name
            for var in desc.blocks[index].vars:  # the step's own names, fresh in graphc
                if var.name not in inner:
                    if var.name in block.vars:
                        inner[var.name] = unique_name.generate(f"{var.name}.step")
                    _create_var(block, var, feeds, where, inner.get(var.name, var.name))
            p = plan(desc.blocks[index].ops, f"{where}, block {index}")
            from .program_desc import _append_ops
            _append_ops(desc, program, desc.blocks[index].ops, feeds, where, inner, p)
            for pre, st in zip(ex_states, states):
                rnn.update_memory(block.var(inner[pre]), block.var(inner.get(st, st)))
            for o in outs:
                rnn.step_output(block.var(inner.get(o, o)))
        results = rnn()
    except ProgramDescError:
        raise
    except GraphcError as exc:
        raise ProgramDescError(f"{where}: the recurrent op of block {index} does not build "
                               f"in graphc: {exc}") from None
    for r, o in zip(results if isinstance(results, list) else [results], outs):
        block.append_op("assign", {"X": [r.name]}, {"Out": [outer(o)]})
