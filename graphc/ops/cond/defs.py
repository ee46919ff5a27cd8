"""cond / case / switch_case / ifelse: each branch a nested graph (a region) taking the op's
Input values in order and returning its Out values; the branches agree on their outputs."""

from __future__ import annotations

from ...ir.opdef import register
from ...ir.types import TensorType
from ..scan.defs import body_graph


def _merge(c, a: TensorType, b: TensorType, k: int, i: int) -> TensorType:
    """Output ``k``'s type over two branches: equal dtypes and ranks; a dimension that one
    branch knows and the other does not (-1) stays unknown."""
    c.check(a.dtype == b.dtype and a.rank == b.rank and a.lod_level == b.lod_level
            and a.array == b.array and all(x == y or -1 in (x, y)
                                           for x, y in zip(a.shape, b.shape)),
            f"branch {i} returns output {k} as {b} but branch 0 as {a}: every branch must "
            "return the same structure, dtypes and shapes (one compiled program holds them "
            "all), unless the predicate is known while building (computed from constants), "
            "when the layer keeps the taken branch only (docs/control_flow.md)")
    return TensorType(tuple(x if x == y else -1 for x, y in zip(a.shape, b.shape)), a.dtype,
                      a.sparse, a.lod_level, a.array)


def branch_types(c, texts: list[str], inputs: list[TensorType]) -> list[TensorType]:
    """Check each branch against the op's inputs; the merged types of their outputs."""
    merged = None
    for i, text in enumerate(texts):
        body = body_graph(text)
        c.check(len(body.inputs) == len(inputs),
                f"branch {i} takes {len(body.inputs)} inputs but the op gives {len(inputs)}")
        for k, (t, v) in enumerate(zip(inputs, body.inputs)):
            c.check(t.dtype == v.type.dtype and t.rank == v.type.rank and all(
                x == y or -1 in (x, y) for x, y in zip(t.shape, v.type.shape)),
                f"Input {k} is {t} but branch {i} reads {v.type}")
        outs = [v.type for v in body.outputs]
        if merged is None:
            merged = outs
            continue
        c.check(len(outs) == len(merged), f"branch {i} returns {len(outs)} values but branch 0 "
                                          f"returns {len(merged)}")
        merged = [_merge(c, a, b, k, i) for k, (a, b) in enumerate(zip(merged, outs))]
    return merged or []


def _scalar(c, t: TensorType, slot: str, dtypes: tuple[str, ...], what: str) -> None:
    c.check(t.dtype in dtypes and all(d == 1 for d in t.shape),
            f"{slot} must be a {what} tensor of one element (shape [1]), got {t}")


def _cond(c):
    _scalar(c, c.x("Cond"), "Cond", ("bool",), "bool")
    return {"Out": branch_types(c, [c["true_body"], c["false_body"]], c.xs("Input"))}


def _case(c):
    conds, branches = c.xs("Conds"), c["branches"]
    for t in conds:
        _scalar(c, t, "Conds", ("bool",), "bool")
    c.check(len(branches) == len(conds) + 1,
            f"{len(conds)} conditions need {len(conds) + 1} branches (the last the default), "
            f"got {len(branches)}")
    return {"Out": branch_types(c, branches, c.xs("Input"))}


def _switch_case(c):
    _scalar(c, c.x("Index"), "Index", ("int32", "int64", "uint8"), "int32/int64/uint8")
    keys, branches = c["keys"], c["branches"]
    c.check(len(set(keys)) == len(keys), f"keys must be distinct, got {keys}")
    c.check(len(branches) == len(keys) + 1,
            f"{len(keys)} keys need {len(keys) + 1} branches (the last the default), got "
            f"{len(branches)}")
    return {"Out": branch_types(c, branches, c.xs("Input"))}


def _ifelse(c):
    cond = c.x("Cond")
    c.check(cond.dtype == "bool" and (cond.rank == 1 or cond.rank == 2 and cond.shape[1] == 1),
            f"Cond must be a bool [N, 1] tensor (one condition per row), got {cond}")
    rows = cond.shape[0]
    for t in c.xs("X"):
        c.check(t.rank >= 1 and (t.shape[0] == rows or -1 in (t.shape[0], rows)),
                f"X {t} must have the rows of Cond {cond}")
    outs = branch_types(c, [c["true_body"], c["false_body"]], [*c.xs("X"), *c.xs("Input")])
    c.check(outs, "the branches return nothing (give each an ie.output)")
    for i, text in enumerate((c["true_body"], c["false_body"])):
        for k, v in enumerate(body_graph(text).outputs):
            t = v.type
            c.check(t.rank >= 1 and (t.shape[0] == rows or -1 in (t.shape[0], rows)),
                    f"branch {i} returns output {k} as {t}, not one row per row of Cond {cond}")
    return {"Out": [TensorType((rows, *t.shape[1:]), t.dtype) for t in outs]}


register("cond", "Cond Input*?", "Out*", {"true_body": "str", "false_body": "str"},
         infer=_cond, regions=("true_body", "false_body"),
         doc="Out = true_body(Input) if Cond else false_body(Input); only the taken branch "
             "runs (lax.cond), Cond a bool of one element")
register("case", "Conds* Input*?", "Out*", {"branches": "strs"}, infer=_case,
         regions=("branches",),
         doc="Out = branches[i](Input) for the first true Conds[i], else the last branch "
             "(the default); only that branch runs (lax.switch)")
register("switch_case", "Index Input*?", "Out*", {"branches": "strs", "keys": "ints"},
         infer=_switch_case, regions=("branches",),
         doc="Out = branches[i](Input) where keys[i] == Index, else the last branch (the "
             "default); only that branch runs (lax.switch)")
register("ifelse", "Cond X* Input*?", "Out*", {"true_body": "str", "false_body": "str"},
         infer=_ifelse, regions=("true_body", "false_body"),
         doc="row r of Out = row r of true_body(X, Input) where Cond[r], else of "
             "false_body(X, Input); the bodies are row-wise (each row on its own), so both run "
             "on every row and each row is selected (docs/control_flow.md)")
