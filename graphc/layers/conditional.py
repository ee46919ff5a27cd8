"""Paddle 1.8's cond, case and switch_case, and what every conditional layer shares: each builds
ONE op (ops/cond/) whose branches are regions taken from the ops the branch appended."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.default_programs import default_main_program
from ..ir.errors import ArgumentTypeError, ArgumentValueError, ProgramError
from ..ir.program import Parameter, Variable
from ..ir.regions import BlockMark, Captured, body_text, drop_locals, take
from ..ir.source import user_source
from .helper import LayerHelper
from .host_fold import host_value


def where_at() -> str:
    where = user_source()
    return f" (at {where})" if where else ""


def check_scalar(layer: str, arg: str, value, dtypes=("bool",)) -> Variable:
    """``value`` must be a Variable of one element in one of ``dtypes``."""
    if not isinstance(value, Variable):
        raise ArgumentTypeError(f"{layer}: {arg} must be a Variable, got "
                                f"{type(value).__name__}{where_at()}")
    if value.dtype not in dtypes or value.shape is None or any(d != 1 for d in value.shape):
        raise ArgumentTypeError(f"{layer}: {arg} must be a {'/'.join(dtypes)} tensor of one "
                                f"element (shape [1]), got '{value.name}' {value.dtype} "
                                f"{None if value.shape is None else list(value.shape)}"
                                f"{where_at()}")
    return value


def named_helper(layer: str, layer_type: str, name) -> LayerHelper:
    """The layer's helper; ``name`` must be a str or None, as Paddle checks."""
    if name is not None and not isinstance(name, str):
        raise ArgumentTypeError(f"{layer}: name must be a str or None, got "
                                f"{type(name).__name__}{where_at()}")
    return LayerHelper(layer_type, name)


# -- nested structures of Variables (Paddle's nest: lists, tuples, dicts by sorted key) --------
def flatten(nest) -> list:
    if isinstance(nest, dict):
        return [x for k in sorted(nest) for x in flatten(nest[k])]
    if isinstance(nest, list | tuple):
        return [x for item in nest for x in flatten(item)]
    return [nest]


def _shape_of(nest):
    if isinstance(nest, dict):
        return ("dict", tuple((k, _shape_of(nest[k])) for k in sorted(nest)))
    if isinstance(nest, list | tuple):
        return ("seq", tuple(_shape_of(x) for x in nest))
    return "leaf"


def pack(nest, leaves: list):
    """``leaves`` in the structure of ``nest``."""
    it = iter(leaves)

    def build(n):
        if isinstance(n, dict):
            return {k: build(n[k]) for k in sorted(n)}
        if isinstance(n, list | tuple):
            items = [build(x) for x in n]
            return type(n)(*items) if hasattr(n, "_fields") else type(n)(items)
        return next(it)
    return build(nest)


# -- branches --------------------------------------------------------------------------------
@dataclass
class Branch:
    """The ops one branch appended (taken out of the block), what it returns, and the
    placeholders standing for its own inputs (IfElse's rows), first among its inputs."""

    mark: BlockMark
    captured: Captured
    returns: list = field(default_factory=list)
    placeholders: list = field(default_factory=list)


def run_branch(fn, block) -> tuple[Branch, object]:
    """Call ``fn`` (None: an empty branch) and take the ops it appended out of ``block``."""
    mark = BlockMark.of(block)
    try:
        result = fn() if fn is not None else None
    finally:
        captured = take(mark)
    return Branch(mark, captured), result


def _lives_on(var) -> bool:
    """A variable created in a branch that outlives it: a parameter, a persistable, a feed."""
    return isinstance(var, Parameter) or var is not None and (var.persistable or var.is_data)


def drop_branch_locals(block, branch: Branch) -> None:
    keep = [n for n in branch.captured.local if _lives_on(block.vars.get(n))]
    drop_locals(branch.mark, branch.captured, keep)


def touches(block, captured: Captured) -> tuple[list[str], list[str]]:
    """Outer names the branch reads before writing them, and the ones it writes; parameters
    and persistables it creates count as outer (they outlive the branch)."""
    def outer(n):
        if n not in captured.local:
            return True
        return _lives_on(block.vars.get(n))

    written: set[str] = set()
    reads: list[str] = []
    writes: list[str] = []
    for op in captured.ops:
        for n in op.input_arg_names:
            if n not in written and outer(n) and n not in reads:
                reads.append(n)
        for n in op.output_arg_names:
            if outer(n) and n not in writes:
                writes.append(n)
            written.add(n)
    return reads, writes


def _has_value(block, name: str) -> bool:
    """Whether ``name`` holds a value before the op being built: state, a feed, or written by
    an op still in the block."""
    var = block.vars.get(name)
    return var is not None and (var.persistable or var.is_data) or any(
        name in op.output_arg_names for op in block.ops)


def _zeros_where_unwritten(layer, block, branches, touched, names, where) -> None:
    """Make every branch write each of ``names``: the ones leaving it alone write zeros of
    its type, sized like the first batch input ([-1, ...]) where its first dim is unknown."""
    from .manipulation import fill_constant_batch_size_like
    from .tensor import assign, fill_constant
    batch = [block.var(n) for _, (r, _) in zip(branches, touched) for n in r
             if not _lives_on(block.vars.get(n)) or block.var(n).is_data]
    batch = [v for v in batch if v.shape and v.shape[0] == -1]
    for n in names:
        var = block.var(n)
        shape = None if var.shape is None else list(var.shape)
        if shape is None or -1 in shape[1:] or shape and shape[0] == -1 and not batch:
            raise ProgramError(f"{layer}: '{n}' is written in a branch but has no value before "
                               f"{layer} ({shape}): a branch that leaves it alone has nothing "
                               f"to give. Give it a value first (fill_constant, "
                               f"create_global_var){where}")
        for b, (_, w) in zip(branches, touched):
            if n in w:
                continue
            mark = BlockMark.of(block)
            if shape and shape[0] == -1:
                zeros = fill_constant_batch_size_like(batch[0], shape, var.dtype, 0.0)
            else:
                zeros = fill_constant(shape, var.dtype, 0.0)
            assign(zeros, var)
            extra = take(mark)
            b.captured.ops += extra.ops
            b.captured.local |= extra.local


def build_region_op(layer: str, helper: LayerHelper, op_type: str, control: dict,
                    branches: list[Branch], region_attrs, attrs=None, outer_inputs=None):
    """Append the op holding ``branches``: returns (one Variable per returned value, in
    order). Outer variables a branch writes are carried: the op takes their values before
    (when some branch leaves them alone) and gives their new values under the same names.
    ``region_attrs(texts) -> attrs`` places the branch texts; ``outer_inputs``: the values
    standing behind each branch's placeholders (IfElse's X)."""
    block = default_main_program().current_block()
    where = where_at()
    touched = [touches(block, b.captured) for b in branches]
    carried: list[str] = []
    for _, writes in touched:
        carried += [n for n in writes if n not in carried]
    old = [n for n in carried if any(n not in w for _, w in touched)]
    unset = [n for n in old if not _has_value(block, n)]
    if unset:  # a branch leaving it alone gives zeros (Paddle leaves it uninitialised)
        _zeros_where_unwritten(layer, block, branches, touched, unset, where)
        touched = [touches(block, b.captured) for b in branches]
        old = [n for n in old if n not in unset]
    reads: list[str] = []
    holders = {p.name for b in branches for p in b.placeholders}
    for b, (r, w) in zip(branches, touched):
        # an outer value returned as it is enters as an input
        returned = [v.name for v in b.returns if v.name not in w and (
            v.name not in b.captured.local or _lives_on(v))]
        reads += [n for n in r + returned if n not in reads and n not in holders]
    reads += [n for n in old if n not in reads]
    for n in old:
        var = block.var(n)
        if var.shape is None:
            raise ProgramError(f"{layer}: '{n}' is written in a branch but has no value before "
                               f"{layer}: a branch that leaves it alone has nothing to give. "
                               f"Give it a value first (fill_constant, create_global_var)"
                               f"{where}")
    inputs = [block.var(n) for n in reads]
    texts = []
    for i, b in enumerate(branches):
        outs = [v.name for v in b.returns] + carried
        texts.append(body_text(block, b.captured.ops, [*b.placeholders, *inputs], outs,
                               f"{helper.name}_{i}", f"{layer}'s branch {i}{where}"))
    results = [helper.create_variable_for_type_inference(v.dtype)
               for v in branches[0].returns]
    ins = dict(control)
    if outer_inputs is not None:
        ins["X"] = outer_inputs
    if inputs:
        ins["Input"] = inputs
    helper.append_op(op_type, ins, {"Out": results + [block.var(n) for n in carried]},
                     {**(attrs or {}), **region_attrs(texts)})
    for b in branches:
        drop_branch_locals(block, b)
        for p in b.placeholders:
            block.vars.pop(p.name, None)
    return results


def _returns(layer: str, outputs: list, names: list[str]):
    """The branches' returned structures, checked alike: (structure, [leaves per branch])."""
    given = [o for o in outputs if o is not None]
    if given and len(given) != len(outputs):
        none = [n for n, o in zip(names, outputs) if o is None]
        some = [n for n, o in zip(names, outputs) if o is not None]
        raise ProgramError(f"{layer}: incompatible return values: {', '.join(none)} return(s) "
                           f"None while {', '.join(some)} return(s) a value{where_at()}")
    if not given:
        return None, [[] for _ in outputs]
    shape = _shape_of(given[0])
    for n, o in zip(names[1:], given[1:]):
        if _shape_of(o) != shape:
            raise ProgramError(f"{layer}: incompatible return values: {names[0]} returns "
                               f"{_describe(given[0])} but {n} returns {_describe(o)}{where_at()}")
    leaves = [flatten(o) for o in given]
    for n, ls in zip(names, leaves):
        for v in ls:
            if not isinstance(v, Variable):
                raise ProgramError(f"{layer}: {n} must return Variables (or lists, tuples "
                                   f"and dicts of them), got {type(v).__name__}{where_at()}")
    return given[0], leaves


def _describe(nest) -> str:
    if isinstance(nest, dict):
        return "{" + ", ".join(f"{k!r}: {_describe(nest[k])}" for k in sorted(nest)) + "}"
    if isinstance(nest, list | tuple):
        return "(" + ", ".join(_describe(x) for x in nest) + ")"
    return "Variable" if isinstance(nest, Variable) else type(nest).__name__


def _agree(leaves: list[list]) -> bool:
    """Whether every branch returns each value in one dtype, rank and LoD level, with dims
    that agree where both know them (what one op's output type can hold)."""
    def same(a, b):
        return (a.dtype == b.dtype and a.lod_level == b.lod_level and a.shape is not None
                and b.shape is not None and len(a.shape) == len(b.shape)
                and all(x == y or -1 in (x, y) for x, y in zip(a.shape, b.shape)))
    return all(same(ls[k], v) for ls in leaves[1:] for k, v in enumerate(leaves[0][:len(ls)]))


def _inline(block, branches: list[Branch], chosen: int, structure, leaves):
    """The branch picked while building, as if written without the conditional: its ops go
    back into the block, the others' ops are dropped (parameters they made stay, as Paddle
    creates them too)."""
    for i, b in enumerate(branches):
        if i != chosen:
            drop_branch_locals(block, b)
    taken = branches[chosen]
    block.ops.extend(taken.captured.ops)
    block.program._bump()
    from .tensor import assign
    # an outer value returned as it is comes back as a new variable, as Paddle's result is
    outs = [v if v.name in taken.captured.local and not _lives_on(v) else assign(v)
            for v in leaves[chosen]]
    return pack(structure, outs)


def _branches_op(layer, helper, op_type, control, fns, names, region_attrs, attrs=None,
                 pick=None):
    """Run each of ``fns`` as a branch and append the op; the merged returned structure.
    Branches returning values of different types need their predicate known while building
    (``pick() -> branch index or None``): that branch is then the only one kept."""
    block = default_main_program().current_block()
    branches, outputs = [], []
    for fn in fns:
        b, out = run_branch(fn, block)
        branches.append(b)
        outputs.append(out)
    structure, leaves = _returns(layer, outputs, names)
    for b, ls in zip(branches, leaves):
        b.returns = ls
    if structure is not None and pick is not None and not _agree(leaves):
        chosen = pick()
        if chosen is not None:
            return _inline(block, branches, chosen, structure, leaves)
    if structure is None and not any(touches(block, b.captured)[1] for b in branches):
        return None  # nothing returned, nothing written: the branches have no effect
    results = build_region_op(layer, helper, op_type, control, branches, region_attrs, attrs)
    return None if structure is None else pack(structure, results)


def _first_true(preds: list, default: int):
    """The index of the first pred known true while building, ``default`` when all are known
    false; None when a pred before the first true one is not known."""
    for i, p in enumerate(preds):
        value = host_value(p)
        if value is None:
            return None
        if bool(value.reshape(-1)[0]):
            return i
    return default


def _key_branch(index, keys: list[int]):
    """The branch of the key ``index`` holds while building (the default, last, when none);
    None when it is not known."""
    value = host_value(index)
    if value is None:
        return None
    k = int(value.reshape(-1)[0])
    return keys.index(k) if k in keys else len(keys)


def _callable(layer: str, arg: str, fn, optional: bool = True):
    if fn is None and optional or callable(fn):
        return fn
    raise ArgumentTypeError(f"{layer}: {arg} must be callable, got {type(fn).__name__}{where_at()}")


def cond(pred, true_fn=None, false_fn=None, name=None):
    """``true_fn()`` if ``pred`` (a bool of one element) is true else ``false_fn()``: one
    ``cond`` op, only the taken branch runs. Both return the same structure of Variables (or
    both None); outer variables a branch writes are updated only when it is taken."""
    check_scalar("cond", "pred", pred)
    _callable("cond", "true_fn", true_fn)
    _callable("cond", "false_fn", false_fn)
    helper = named_helper("cond", "cond", name)
    return _branches_op("cond", helper, "cond", {"Cond": pred}, [true_fn, false_fn],
                        ["true_fn", "false_fn"],
                        lambda t: {"true_body": t[0], "false_body": t[1]},
                        pick=lambda: _first_true([pred], 1))


def case(pred_fn_pairs, default=None, name=None):
    """The fn of the first pair whose pred is true, else ``default()`` (None: the last
    pair's fn): one ``case`` op."""
    if not isinstance(pred_fn_pairs, list | tuple) or not pred_fn_pairs:
        error = ArgumentValueError if isinstance(pred_fn_pairs, list | tuple) \
            else ArgumentTypeError
        raise error(f"case: pred_fn_pairs must be a non-empty list or tuple of (pred, fn) "
                    f"pairs, got {pred_fn_pairs!r}{where_at()}")
    for pair in pred_fn_pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise ArgumentTypeError(f"case: every element of pred_fn_pairs must be a (pred, fn) "
                               f"2-tuple, got {pair!r}{where_at()}")
        check_scalar("case", "a pred of pred_fn_pairs", pair[0])
        _callable("case", f"the fn for {pair[0].name}", pair[1], optional=False)
    pairs = list(pred_fn_pairs)
    if default is None:
        default = pairs.pop()[1]
    else:
        _callable("case", "default", default, optional=False)
    helper = named_helper("case", "case", name)
    fns = [fn for _, fn in pairs] + [default]
    if not pairs:  # only a default: it is simply called
        return default()
    names = [f"the fn of pair {i}" for i in range(len(pairs))] + ["default"]
    return _branches_op("case", helper, "case", {"Conds": [p for p, _ in pairs]}, fns, names,
                        lambda t: {"branches": t},
                        pick=lambda: _first_true([p for p, _ in pairs], len(pairs)))


def switch_case(branch_index, branch_fns, default=None, name=None):
    """The fn whose key equals ``branch_index`` (an int32/int64/uint8 of one element), else
    ``default()`` (None: the fn of the largest key): one ``switch_case`` op."""
    check_scalar("switch_case", "branch_index", branch_index, ("int32", "int64", "uint8"))
    if not isinstance(branch_fns, list | tuple | dict):
        raise ArgumentTypeError(f"switch_case: branch_fns must be a dict, list or tuple, got "
                           f"{type(branch_fns).__name__}{where_at()}")
    items = list(branch_fns.items()) if isinstance(branch_fns, dict) else list(branch_fns)
    if items and all(callable(fn) for fn in items):
        items = list(enumerate(items))
    keys = []
    for pair in items:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise ArgumentTypeError(f"switch_case: the elements of branch_fns must be (int, fn) "
                               f"2-tuples or callables, got {pair!r}{where_at()}")
        key, fn = pair
        if isinstance(key, bool) or not isinstance(key, int):
            raise ArgumentTypeError(f"switch_case: the keys of branch_fns must be ints, got "
                               f"{key!r}{where_at()}")
        if key in keys:
            raise ArgumentValueError(f"switch_case: the key {key} appears more than once in "
                               f"branch_fns{where_at()}")
        keys.append(key)
        _callable("switch_case", f"the fn for key {key}", fn, optional=False)
    if not items:
        raise ArgumentValueError(f"switch_case: branch_fns is empty{where_at()}")
    if default is None:
        items = sorted(items, key=lambda p: p[0])
        default = items.pop()[1]
    else:
        _callable("switch_case", "default", default, optional=False)
    helper = named_helper("switch_case", "switch_case", name)
    names = [f"the fn for key {k}" for k, _ in items] + ["default"]
    return _branches_op("switch_case", helper, "switch_case", {"Index": branch_index},
                        [fn for _, fn in items] + [default], names,
                        lambda t: {"branches": t}, {"keys": [k for k, _ in items]},
                        pick=lambda: _key_branch(branch_index, [k for k, _ in items]))


__all__ = ["cond", "case", "switch_case"]
