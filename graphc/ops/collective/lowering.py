"""Lowering rules for the collective ops, twice: with JAX's named-axis collectives (``psum``,
``psum_scatter``, ``all_gather``) for a step mapped over devices, and as plain arithmetic over
every replica's inputs for the interpreter's simulated replicas (the reference meaning).

A collective outside a data-parallel step (no replicas) is an error, except on one rank.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from ...backends.lowering import LoweringError, RuleContext, cross_replica, lowering
from ...backends.selected_rows import SelectedRows, concat_rows

# one flat buffer of several tensors and back, as the coalesced optimizers lay them out
from ..coalesce.lowering import _flat, _split

_ALLREDUCE = ("c_allreduce", "c_fused_allreduce")
_REDUCE_SCATTER = ("c_reduce_scatter", "c_fused_reduce_scatter")
_ALLGATHER = ("c_allgather", "c_fused_allgather")


def _replicas(c: RuleContext):
    r = c.replicas
    if r is None:
        raise LoweringError(f"{c.where}: a collective op needs data-parallel replicas; run "
                            "the program through with_data_parallel (or the interpreter's "
                            "num_replicas)")
    if r.nranks != c["nranks"]:
        raise LoweringError(f"{c.where}: the op was built for {c['nranks']} replicas but runs "
                            f"on {r.nranks}")
    return r


def _as_list(x) -> list:
    return list(x) if isinstance(x, list | tuple) else [x]


def _result(c: RuleContext, outs: list) -> dict:
    return {"Out": outs if c.op_type.startswith("c_fused") else outs[0]}


def _rows(x, nranks: int):
    """``x`` flattened, zero-padded to ``nranks * c`` and laid out as ``[nranks, c]``."""
    n = x.size
    c = -(-n // nranks)
    flat = x.reshape(-1)
    if nranks * c != n:
        flat = jnp.pad(flat, (0, nranks * c - n))
    return flat.reshape(nranks, c)


def _unrows(rows, shape):
    """Inverse of ``_rows``: the first prod(shape) elements of ``rows`` in ``shape``."""
    return rows.reshape(-1)[:math.prod(shape)].reshape(shape)


def _shapes(c: RuleContext) -> list[tuple]:
    out, i = [], 0
    for r in c["ranks"]:
        out.append(tuple(c["shapes"][i:i + r]))
        i += r
    return out


def _mean(c: RuleContext, total, nranks: int):
    return total / jnp.asarray(nranks, total.dtype) if c["reduce"] == "mean" else total


# -- on devices (inside shard_map over the replicas' mesh) ------------------------------
def _hierarchical_psum(flat, r, inter: int):
    """Reduce-scatter inside each group of ``inter`` replicas, all-reduce across groups,
    all-gather inside: each link between groups carries 1/inter of the buffer."""
    if r.local != inter:
        raise LoweringError(f"hierarchical all-reduce over groups of {inter} needs a mesh with "
                            f"groups of {inter}; this step's has {r.local}")
    rows = _rows(flat, inter)
    part = lax.psum_scatter(rows, r.axes("local"), scatter_dimension=0, tiled=True)
    part = lax.psum(part, r.axes("cross"))
    return lax.all_gather(part, r.axes("local"), axis=0, tiled=True).reshape(-1)[:flat.size]


@lowering(*_ALLREDUCE)
def _allreduce(c: RuleContext, X):
    r = _replicas(c)
    xs = _as_list(X)
    flat = _flat(xs)
    if c["inter_nranks"]:
        total = _hierarchical_psum(flat, r, c["inter_nranks"])
    else:
        total = lax.psum(flat, r.axes())
    return _result(c, _split(_mean(c, total, r.nranks), xs))


@lowering(*_REDUCE_SCATTER)
def _reduce_scatter(c: RuleContext, X):
    r = _replicas(c)
    rows = [_rows(x, r.nranks) for x in _as_list(X)]
    widths = [x.shape[1] for x in rows]
    buf = jnp.concatenate(rows, axis=1) if len(rows) > 1 else rows[0]
    mine = _mean(c, lax.psum_scatter(buf, r.axes(), scatter_dimension=0, tiled=True), r.nranks)
    return _result(c, _split_columns(mine, widths))


def _split_columns(buf, widths: list[int]) -> list:
    out, start = [], 0
    for w in widths:
        out.append(buf[:, start:start + w])
        start += w
    return out


@lowering("c_shard")
def _shard(c: RuleContext, X):
    r = _replicas(c)
    rows = _rows(X, r.nranks)
    return {"Out": lax.dynamic_slice_in_dim(rows, r.axis_index(), 1, axis=0)}


@lowering("c_allgather_rows")
def _allgather_rows(c: RuleContext, X):
    """Every replica's rows and values, in replica order (the order of their batch slices)."""
    r = _replicas(c)
    rows = lax.all_gather(X.rows, r.axes(), axis=0, tiled=True)
    values = lax.all_gather(X.values, r.axes(), axis=0, tiled=True)
    return {"Out": SelectedRows(rows, _mean(c, values, r.nranks), X.height)}


@lowering(*_ALLGATHER)
def _allgather(c: RuleContext, X):
    r = _replicas(c)
    xs = _as_list(X)
    buf = jnp.concatenate(xs, axis=1) if len(xs) > 1 else xs[0]
    rows = lax.all_gather(buf, r.axes(), axis=0, tiled=True)
    parts = _split_columns(rows, [x.shape[1] for x in xs])
    return _result(c, [_unrows(p, s) for p, s in zip(parts, _shapes(c))])


# -- simulated replicas (the interpreter) ------------------------------------------------
def _sum_over(values: list):
    total = values[0]
    for v in values[1:]:
        total = total + v
    return total


@cross_replica(*_ALLREDUCE)
def _allreduce_ref(c: RuleContext, per_replica: list[dict]) -> list[dict]:
    r = _replicas(c)
    xs = [_as_list(ins["X"]) for ins in per_replica]
    totals = [_mean(c, _sum_over([x[i] for x in xs]), r.nranks) for i in range(len(xs[0]))]
    return [_result(c, list(totals)) for _ in per_replica]


@cross_replica(*_REDUCE_SCATTER)
def _reduce_scatter_ref(c: RuleContext, per_replica: list[dict]) -> list[dict]:
    r = _replicas(c)
    xs = [_as_list(ins["X"]) for ins in per_replica]
    rows = [_rows(_mean(c, _sum_over([x[i] for x in xs]), r.nranks), r.nranks)
            for i in range(len(xs[0]))]
    return [_result(c, [t[k:k + 1] for t in rows]) for k in range(r.nranks)]


@cross_replica("c_allgather_rows")
def _allgather_rows_ref(c: RuleContext, per_replica: list[dict]) -> list[dict]:
    r = _replicas(c)
    whole = concat_rows([ins["X"] for ins in per_replica])
    whole = whole.with_values(_mean(c, whole.values, r.nranks))
    return [{"Out": whole} for _ in per_replica]


@cross_replica(*_ALLGATHER)
def _allgather_ref(c: RuleContext, per_replica: list[dict]) -> list[dict]:
    _replicas(c)
    xs = [_as_list(ins["X"]) for ins in per_replica]
    whole = [_unrows(jnp.concatenate([x[i] for x in xs], axis=0), s)
             for i, s in enumerate(_shapes(c))]
    return [_result(c, list(whole)) for _ in per_replica]
