"""Collective ops: what data-parallel replicas exchange (all-reduce, reduce-scatter, all-gather,
and all-gather of a row-sparse gradient's rows) and the slicing Reduce mode's sharding needs.

Every op carries ``nranks``, the replica count its graph was built for: the backend refuses to
run it on another count. A *shard* of a tensor of ``n`` elements is its flattened elements,
zero-padded to ``nranks * c`` with ``c = ceil(n / nranks)``, as a ``[1, c]`` piece per replica
(replica ``r`` holds elements ``r*c .. r*c+c-1``); ``shard_shape`` computes it. The ``fused_``
forms take lists and exchange them as one flat buffer per call (one collective per bucket).
"""

from __future__ import annotations

from ...ir.opdef import COLLECTIVE, NO_GRAD, InferContext, register
from ...ir.shapes import shard_shape
from ...ir.types import TensorType

REDUCTIONS = ("sum", "mean")
GROUPS = ("all",)  # which replicas take part; hierarchical all-reduce is an attribute


def _check_common(c: InferContext) -> None:
    c.check(c["nranks"] >= 1, f"nranks must be >= 1, got {c['nranks']}")
    if "reduce" in c.attrs:
        c.check(c["reduce"] in REDUCTIONS,
                f"reduce must be one of {list(REDUCTIONS)}, got {c['reduce']!r}")


def _check_same_dtype(c: InferContext, xs: list[TensorType]) -> None:
    dtypes = sorted({t.dtype for t in xs})
    c.check(len(dtypes) == 1, f"a fused collective exchanges one flat buffer, so its inputs "
                              f"must share a dtype; got {dtypes}")


def _allreduce(c: InferContext):
    _check_common(c)
    c.check(c["inter_nranks"] >= 0, f"inter_nranks must be >= 0, got {c['inter_nranks']}")
    if c["inter_nranks"]:
        c.check(c["nranks"] % c["inter_nranks"] == 0,
                f"hierarchical all-reduce needs nranks ({c['nranks']}) divisible by "
                f"inter_nranks ({c['inter_nranks']})")
    xs = c.xs("X")
    if c.op_type.startswith("c_fused"):
        c.check(len(xs) >= 1, "X must have at least one value")
        _check_same_dtype(c, xs)
    return {"Out": list(xs)}


def _sharded(c: InferContext, t: TensorType) -> TensorType:
    c.check(all(d >= 0 for d in t.shape),
            f"cannot shard a tensor of unknown shape {list(t.shape)}")
    return TensorType(shard_shape(t.shape, c["nranks"]), t.dtype)


def _reduce_scatter(c: InferContext):
    _check_common(c)
    xs = c.xs("X")
    if c.op_type.startswith("c_fused"):
        _check_same_dtype(c, xs)
    return {"Out": [_sharded(c, t) for t in xs]}


def _shard(c: InferContext):
    _check_common(c)
    return {"Out": _sharded(c, c.x("X"))}


def _unflatten_shapes(c: InferContext) -> list[tuple[int, ...]]:
    ranks, dims = c["ranks"], c["shapes"]
    c.check(sum(ranks) == len(dims), f"ranks {ranks} do not add up to the {len(dims)} dims "
                                     "in shapes")
    out, i = [], 0
    for r in ranks:
        out.append(tuple(dims[i:i + r]))
        i += r
    return out


def _allgather(c: InferContext):
    _check_common(c)
    xs = c.xs("X")
    if c.op_type.startswith("c_fused"):
        _check_same_dtype(c, xs)
    shapes = _unflatten_shapes(c)
    c.check(len(shapes) == len(xs), f"{len(xs)} inputs but {len(shapes)} shapes")
    outs = []
    for t, shape in zip(xs, shapes):
        c.check(t.shape == shard_shape(shape, c["nranks"]),
                f"X {list(t.shape)} is not a shard of {list(shape)} over {c['nranks']} "
                f"replicas (expected {list(shard_shape(shape, c['nranks']))})")
        outs.append(TensorType(shape, t.dtype))
    return {"Out": outs}


_TRAITS = (COLLECTIVE, NO_GRAD)
_REDUCE_ATTRS = {"nranks": "int", "reduce": ("str", "mean"), "inter_nranks": ("int", 0)}

for _name, _slots in (("c_allreduce", ("X", "Out")), ("c_fused_allreduce", ("X*", "Out*"))):
    register(_name, *_slots, dict(_REDUCE_ATTRS), infer=_allreduce, traits=_TRAITS,
             inplace={"Out": "X"},
             doc="sum or mean of X over every replica, on every replica"
                 + ("; the list is exchanged as one flat buffer" if "fused" in _name else "")
                 + "; inter_nranks > 0: reduce-scatter within groups of that many replicas, "
                   "all-reduce across groups, all-gather within (hierarchical)")

for _name, _slots in (("c_reduce_scatter", ("X", "Out")),
                      ("c_fused_reduce_scatter", ("X*", "Out*"))):
    register(_name, *_slots, {"nranks": "int", "reduce": ("str", "mean")},
             infer=_reduce_scatter, traits=_TRAITS,
             doc="sum or mean of X over every replica; each replica keeps only its [1, c] "
                 "shard of the result")

register("c_shard", "X", "Out", {"nranks": "int"}, infer=_shard, traits=_TRAITS,
         doc="this replica's [1, c] shard of X (no communication)")

for _name, _slots in (("c_allgather", ("X", "Out")), ("c_fused_allgather", ("X*", "Out*"))):
    register(_name, *_slots, {"nranks": "int", "shapes": "ints", "ranks": "ints"},
             infer=_allgather, traits=_TRAITS,
             doc="the whole tensor (of shape given by shapes/ranks) from every replica's "
                 "[1, c] shard")


def _allgather_rows(c: InferContext):
    _check_common(c)
    x = c.x("X")
    c.check(x.sparse, f"X must be row-sparse (SelectedRows), got the dense {x}; dense "
                      "gradients go through c_allreduce")
    return {"Out": x}


register("c_allgather_rows", "X", "Out", {"nranks": "int", "reduce": ("str", "mean")},
         infer=_allgather_rows, traits=_TRAITS, sparse_inputs=("X",),
         doc="a row-sparse value's sum (or mean) over every replica, on every replica, by "
             "all-gathering rows and values: every replica's rows in replica order (mean: "
             "values / nranks); exchanges nranks x its rows, never the dense tensor")
