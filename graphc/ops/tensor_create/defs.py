"""Creation, random and index ops with Paddle 1.8's names, slots and attributes: linspace, eye,
diag, gaussian_random_batch_size_like, sampling_id, unique(_with_counts), shard_index, is_empty.

unique's outputs have Paddle's data-dependent length padded to the input's (XLA compiles static
shapes only): see docs/porting_from_paddle.md."""

from __future__ import annotations

import math

from ...ir.opdef import INITIALIZER, NO_GRAD, RANDOM, register
from ...ir.types import DTYPES, FLOAT_DTYPES, INT_DTYPES, TensorType
from ..manipulation.defs import _LIKE, _batch_size_like


def _numeric_dtype(c, dtype):
    c.check(dtype in DTYPES and dtype != "bool", f"dtype {dtype!r} must be numeric")


def _linspace(c):
    num = c["num"]
    c.check(num >= 1, f"num {num} must be positive")
    c.check(math.isfinite(c["start"]) and math.isfinite(c["stop"]),
            f"start {c['start']} and stop {c['stop']} must be finite")
    c.check(c["dtype"] in ("float32", "float64"),
            f"dtype {c['dtype']!r} must be float32 or float64 (Paddle 1.8's)")
    return {"Out": TensorType((num,), c["dtype"])}


register("linspace", "", "Out", {"start": "float", "stop": "float", "num": "int",
                                 "dtype": ("dtype", "float32")},
         infer=_linspace, traits=(INITIALIZER, NO_GRAD),
         doc="Out = num evenly spaced values from start to stop, both included (numbers, "
             "not tensors: the length must be known when XLA compiles)")


def _eye(c):
    rows, cols = c["num_rows"], c["num_columns"]
    c.check(rows >= 0, f"num_rows {rows} must be non-negative")
    cols = rows if cols < 0 else cols
    _numeric_dtype(c, c["dtype"])
    return {"Out": TensorType((rows, cols), c["dtype"])}


register("eye", "", "Out", {"num_rows": "int", "num_columns": ("int", -1),
                            "dtype": ("dtype", "float32")},
         infer=_eye, traits=(INITIALIZER, NO_GRAD),
         doc="Out = the [num_rows, num_columns] identity (num_columns -1: square)")


def _diag(c):
    d = c.x("Diagonal")
    c.check(d.rank == 1, f"Diagonal must be 1-D, got {list(d.shape)}")
    return {"Out": TensorType((d.shape[0], d.shape[0]), d.dtype)}


# Paddle 1.8's diag has no gradient op
register("diag", "Diagonal", "Out", infer=_diag, traits=(NO_GRAD,),
         doc="Out = the square matrix with Diagonal on its diagonal, zeros elsewhere")

register("gaussian_random_batch_size_like", "Input", "Out",
         {**_LIKE, "mean": ("float", 0.0), "std": ("float", 1.0), "seed": ("int", 0)},
         infer=_batch_size_like, traits=(RANDOM, NO_GRAD),
         doc="Out ~ N(mean, std^2) in shape, with Input's batch size")


def _sampling_id(c):
    x = c.x("X")
    c.check(x.rank == 2, f"X must be [batch, classes] probabilities, got {list(x.shape)}")
    c.check(x.dtype in FLOAT_DTYPES, f"X must be floating point, got {x.dtype}")
    c.check(c["min"] <= c["max"], f"min {c['min']} must not exceed max {c['max']}")
    return {"Out": TensorType((x.shape[0],), "int64")}


register("sampling_id", "X", "Out", {"min": ("float", 0.0), "max": ("float", 1.0),
                                     "seed": ("int", 0)},
         infer=_sampling_id, traits=(RANDOM, NO_GRAD),
         doc="Out[i] = the first j where r_i < X[i, 0] + ... + X[i, j] for r_i ~ U[min, max) "
             "(the last class when none is)")


def _unique(c):
    x = c.x("X")
    c.check(x.rank == 1, f"X must be 1-D, got {list(x.shape)}")
    c.check(c["dtype"] in ("int32", "int64"), f"dtype {c['dtype']!r} must be int32 or int64")
    ids = TensorType(x.shape, c["dtype"])
    out = {"Out": x, "Index": ids}
    if c.op_type == "unique_with_counts":
        out["Count"] = ids
    return out


_UNIQUE_DOC = ("Out = X's distinct values in order of first appearance, zero-padded to X's "
               "length (Paddle's is unpadded); Index[i] = the position of X[i] in Out")
register("unique", "X", "Out Index", {"dtype": ("dtype", "int32")}, infer=_unique,
         traits=(NO_GRAD,), doc=_UNIQUE_DOC)
register("unique_with_counts", "X", "Out Index Count", {"dtype": ("dtype", "int32")},
         infer=_unique, traits=(NO_GRAD,),
         doc=_UNIQUE_DOC + "; Count[k] = how often Out[k] occurs (0 for padding)")


def _shard_index(c):
    x = c.x("X")
    c.check(x.dtype in INT_DTYPES, f"X must be an integer tensor, got {x.dtype}")
    c.check(x.rank >= 2 and x.shape[-1] in (1, -1),
            f"X must end in a dimension of 1, got {list(x.shape)}")
    c.check(c["index_num"] > 0 and c["nshards"] > 0,
            f"index_num {c['index_num']} and nshards {c['nshards']} must be positive")
    c.check(0 <= c["shard_id"] < c["nshards"],
            f"shard_id {c['shard_id']} must be in [0, nshards={c['nshards']})")
    return {"Out": x}


register("shard_index", "X", "Out", {"index_num": "int", "nshards": "int", "shard_id": "int",
                                     "ignore_value": ("int", -1)},
         infer=_shard_index, traits=(NO_GRAD,),
         doc="Out = X mod shard_size where X lies in shard shard_id (shard_size = "
             "ceil(index_num / nshards)), else ignore_value")
register("is_empty", "X", "Out", infer=lambda c: {"Out": TensorType((1,), "bool")},
         traits=(NO_GRAD,), lod_inputs=("X",), lod="aware",  # a LoD X: no tokens (beam search)
         doc="Out = [X has no elements] (a bool [1]; a LoD X: no tokens)")
