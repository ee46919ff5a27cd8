"""fused_embedding_seq_pool: ``Out[i] = sequence_pool(lookup_table(W, Ids[i]), "SUM")`` for
every slot i at once (Paddle's fused_embedding_seq_pool, extended to several slots).

The fuse-embedding-seq-pool pass writes it (passes/fuse_embedding_seq_pool.py); its derived
gradient ``fused_embedding_seq_pool_grad`` reads W and the Ids and writes one W@GRAD for all
slots (row-sparse with ``is_sparse``, as lookup_table's), in place of the slots' lookup and
pooling gradients and the sum that joined them.
"""

from __future__ import annotations

from ...ir.opdef import InferContext, register
from ...ir.types import INT_DTYPES, TensorType

COMBINERS = ("sum",)


def _infer(c: InferContext):
    w, ids = c.x("W"), c.xs("Ids")
    c.check(w.rank == 2, f"W must be [vocab, width], got {list(w.shape)}")
    c.check(c["combiner"] in COMBINERS,
            f"combiner must be one of {list(COMBINERS)}, got {c['combiner']!r}")
    for i, t in enumerate(ids):
        c.check(t.lod_level == 1, f"Ids[{i}] must be a level-1 LoD value (one sequence of "
                                  f"ids per sample), got {t}")
        c.check(t.dtype in INT_DTYPES, f"Ids[{i}] must be integer, got {t.dtype}")
        c.check(t.rank == 1 or (t.rank == 2 and t.shape[-1] in (1, -1)),
                f"Ids[{i}] must be [tokens] or [tokens, 1], got {list(t.shape)}")
    # one pooled row per sequence of each slot: a dense batch, as sequence_pool's level 1
    return {"Out": [TensorType((-1, w.shape[1]), w.dtype) for _ in ids]}


register("fused_embedding_seq_pool", "W Ids*", "Out*", {
    "combiner": ("str", "sum"), "is_sparse": ("bool", False), "padding_idx": ("int", -1),
}, infer=_infer, lod_inputs=("Ids",), lod="aware",
    grad_reads=("W", "Ids"),  # the gradient needs the ids and the table's shape only
    sparse_grad=("W", "is_sparse"),
    doc="Out[i]: the sum over each sequence of Ids[i] of W's rows (zeros at padding_idx); "
        "every slot's lookup in one gather and one segment sum")
