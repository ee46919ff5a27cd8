"""sequence_pool: pools each variable-length sequence of a LoD value (docs/lod.md).

The other ops say how they treat LoD values in their own registration (``lod_inputs=``...).
"""

from __future__ import annotations

from ...ir.opdef import InferContext, register
from ...ir.types import TensorType

POOL_TYPES = ("SUM", "AVERAGE", "SQRT", "MAX", "FIRST", "LAST")


def _sequence_pool(c: InferContext):
    x = c.x("X")
    c.check(x.lod_level >= 1, f"X must be a LoD value (lod_level 1 or 2), got {x}; "
                              "sequence_pool pools variable-length sequences")
    c.check(x.rank >= 1, f"X needs a token dimension, got {x}")
    c.check(c["pooltype"] in POOL_TYPES,
            f"pooltype must be one of {list(POOL_TYPES)}, got {c['pooltype']!r}")
    # level 1: one row per sequence (a dense batch); level 2: one token per sub-sequence
    return {"Out": TensorType((-1, *x.shape[1:]), x.dtype, False, x.lod_level - 1)}


register("sequence_pool", "X", "Out",
         {"pooltype": ("str", "AVERAGE"), "is_test": ("bool", False),
          "pad_value": ("float", 0.0)},
         infer=_sequence_pool, lod_inputs=("X",), lod="aware",
         doc="pool each innermost sequence: SUM, AVERAGE, SQRT, MAX, FIRST or LAST; empty "
             "sequences give pad_value")
