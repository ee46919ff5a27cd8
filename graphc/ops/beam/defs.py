"""Beam-search helper ops that need no control flow: gather_tree (the full token paths of
a finished beam search, backtraced from the last step through the parent indices)."""

from __future__ import annotations

from ...ir.opdef import NO_GRAD, InferContext, register

_INDEX_DTYPES = ("int32", "int64")


def _gather_tree(c: InferContext):
    ids, parents = c.x("Ids"), c.x("Parents")
    c.check(ids.rank == 3 and ids.dtype in _INDEX_DTYPES,
            f"Ids must be int32/int64 [max_time, batch, beam], got {ids}")
    c.check(parents.rank == 3 and parents.dtype in _INDEX_DTYPES,
            f"Parents must be int32/int64 [max_time, batch, beam], got {parents}")
    c.check(all(a == b or -1 in (a, b) for a, b in zip(ids.shape, parents.shape)),
            f"Parents {parents} must have the shape of Ids {ids}")
    shape = tuple(b if a == -1 else a for a, b in zip(ids.shape, parents.shape))
    return {"Out": ids._replace(shape=shape)}


register("gather_tree", "Ids Parents", "Out", {}, infer=_gather_tree, traits=(NO_GRAD,),
         doc="Out[t, b, k] = Ids[t, b, p_t] with p_{T-1} = k and p_{t-1} = Parents[t, b, p_t]: "
             "each beam's whole path, backtraced from the last step")
