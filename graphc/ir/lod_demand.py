"""LoD demanded of a feed declared dense (an op that needs sequences re-types it as a LoD value,
Paddle passes the fed LoD), and dropped from one declared LoD by a reshape across rows."""

from __future__ import annotations

from .errors import GraphcError
from .retype import ReinferError, apply, lod_only, reinfer

_LEVELS = (1, 2)  # the levels tried, lowest first: the least LoD that satisfies the op


def _dense_feed(var) -> bool:
    # (Paddle's tests mark feeds persistable to read them back from the scope: still feeds)
    # a first dimension declared (graphc.data("d", [6, 2])) is not a token count: kept
    return bool(var.is_data and not var.is_array and
                not var.lod_level and var.shape and var.shape[0] == -1 and
                var.block is not None and var.block.idx == 0)


def _lod_feed(var) -> bool:
    return bool(var.is_data and not var.is_array and var.lod_level and var.shape and
                var.block is not None and var.block.idx == 0)


def feed_sources(block, names, wanted=_dense_feed) -> list:
    """The feed variables declared dense (``wanted``: of that kind) that the values ``names``
    are computed from (through any ops: which of them carry a LoD, re-inference tells), in
    declaration order."""
    program = block.program
    writers: dict[str, list] = {}
    for b in program.blocks:
        for op in b.ops:
            for n in op.output_arg_names:
                writers.setdefault(n, []).append(op)
    seen, stack, found = set(), list(names), {}
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        var = block._find_var(name)
        if var is not None and wanted(var):
            found[name] = var
        for op in writers.get(name, ()):
            stack.extend(op.input_arg_names)
    order = list(program.global_block().vars)
    return sorted(found.values(), key=lambda v: order.index(v.name))


def _trials(feeds: list):
    """Candidate re-typings, fewest feeds and lowest level first: only what the op needs."""
    groups = [[f] for f in feeds] + ([feeds] if len(feeds) > 1 else [])
    for level in _LEVELS:
        for group in groups:
            yield level, group


def retype_for(block, names, accepts, where: str) -> bool:
    """Re-type the dense feeds behind ``names`` as LoD values where that makes
    ``accepts(types)`` (the demanding op's check on its inputs' new types) hold: the feeds
    become LoD values of the level needed (tokens first) and every op built on them is
    inferred again, each keeping its output's shape and dtype. False (nothing changed) when
    no feed is behind them (a parameter, a fill_constant) or no re-typing satisfies the op."""
    dense = [n for n in names if (v := block._find_var(n)) is not None and v.shape is not None
             and not v.lod_level and not v.is_array]
    feeds = feed_sources(block, dense) if dense else []
    program = block.program
    for level, group in _trials(feeds):
        retyped = {f.name: f.type._replace(shape=(-1, *f.shape[1:]), lod_level=level)
                   for f in group}
        try:
            types = reinfer(program, retyped, keep=lod_only)
        except ReinferError:
            continue
        try:
            if not accepts(types):
                continue
        except GraphcError:
            continue
        apply(program, types)
        for f in group:  # for the feed-time messages: who asked for sequences
            f.lod_demanded_by = where
        return True
    return False


def retype_op_inputs(block, opdef, ins: dict, attrs: dict, where: str):
    """The input types of an op being built whose inference refused its dense inputs, after
    re-typing the feeds behind its LoD input slots (``retype_for``); None when that does not
    help or the op is not sequence-aware (an elementwise op refusing a dense operand keeps
    its error)."""
    def in_types(types):
        return {slot: [types.get(n) or block._find_var(n).type for n in names]
                for slot, names in ins.items()}

    def accepts(types):
        opdef.infer_types(in_types(types), attrs, where)
        return True

    if opdef.type in DROP_LOD:
        return _dropped_lod(block, ins, in_types, accepts, where)
    if opdef.lod != "aware":  # row-wise ops carry a LoD but never need one
        return None
    names = [n for slot, ns in ins.items() if slot in opdef.lod_inputs for n in ns]
    if not retype_for(block, names, accepts, where):
        return None
    return in_types({})


def demand_lod(var, level: int, where: str) -> bool:
    """For a layer that needs ``var`` as a LoD value of ``level`` (DynamicRNN.step_input, a
    CTC decoder without lengths): re-type the dense feeds behind it (``retype_for``); False
    when that does not make it one (the layer then refuses as before)."""
    block = var.block
    if block is None or var.shape is None:
        return False

    def accepts(types):
        return (types.get(var.name) or var.type).lod_level == level

    return retype_for(block, [var.name], accepts, where)


# ops whose output Paddle gives no LoD when it has another number of rows than the input
# (reshape's InferShape shares the LoD only where dim 0 is unchanged)
DROP_LOD = frozenset({"reshape", "reshape2"})


def _dropped_lod(block, ins: dict, in_types, accepts, where: str):
    """A reshape across rows of a value computed from feeds declared with a LoD (TDM's
    ``first_layer_node``, the Transformer's decoder inputs): Paddle reshapes the fed rows and
    drops the LoD, so those feeds are re-typed dense (a LoD fed to them is dropped, as for
    any variable declared without one) where every op on them still infers, keeping its
    shape and dtype; an op that needs their sequences keeps the reshape's refusal. The
    op's input types, or None."""
    names = [n for ns in ins.values() for n in ns
             if (v := block._find_var(n)) is not None and v.lod_level and not v.is_array]
    feeds = feed_sources(block, names, _lod_feed) if names else []
    if not feeds:
        return None
    retyped = {f.name: f.type._replace(lod_level=0) for f in feeds}
    try:
        types = reinfer(block.program, retyped, keep=lod_only)
        if not accepts(types):
            return None
    except (ReinferError, GraphcError):
        return None
    apply(block.program, types)
    for f in feeds:  # for the porting guide's question "where did my LoD go"
        f.lod_dropped_by = where
    return in_types(types)
