"""fuse-all-reduce-ops: bucket the gradients' c_allreduce (Reduce mode: c_reduce_scatter) ops
into one c_fused_* op per bucket, a single collective over one flat buffer (gradient fusion).

Matches: ``c_allreduce`` and ``c_reduce_scatter`` ops (what data-parallel inserts), taken in
backward order: the order of the ops that finish their gradients (the graph order of the
all-reduces, which data-parallel puts right after them; Reduce mode's reduce-scatters sit with
the optimizer ops, in parameter order, but are bucketed by when their gradient is ready).

The bucket bound (closed, unlike Paddle's, which closes a bucket only after it overshot):

- A *layer* is the part of the parameter name before the first '.' (``fc_0.w_0`` and
  ``fc_0.b_0`` are layer ``fc_0``); the parameter of a gradient ``w@GRAD`` is ``w``. A *unit*
  is one layer's collectives of one kind (op type, dtype, role and attributes), in backward
  order; units are taken in the order of their first collective.
- Only collectives of one kind share a bucket (a fused op exchanges one flat buffer).
- bytes(bucket) <= ``max_mb`` * 2**20, summed over the whole tensors exchanged, unless the
  bucket is a single collective whose tensor alone is larger: it is then alone.
- At most ``max_layers`` layers per bucket (BuildStrategy.fuse_grad_size_in_TFLOPS, the seeds'
  "max layers per fused all-reduce"); 0 means no layer bound.
- A unit is never split across buckets, unless it alone exceeds the byte bound: it is then cut
  in backward order into buckets of its own, each within the bound (or a single collective).
- Greedy: units go into the open bucket of their kind until the next one would break a bound.
- Fusion must not close a cycle (a member's input computed from another member's output, even
  through other ops): such a bucket is split, first fit in backward order (stat
  ``skipped: bucket split: fusing would create a cycle``), so the bounds still hold.

Produces: a ``c_fused_allreduce`` / ``c_fused_reduce_scatter`` per bucket of two or more, with
the members' attributes; its outputs ARE the members' output values (names and versions stay)
and the members' control dependencies are merged (those between members dropped). A bucket
of one keeps its plain op. Statistics: ``buckets`` (collectives of these kinds afterwards),
``fused`` (ops merged into fused ones), ``skipped: ...`` (bucket of one, why; no candidates).
``bucket_plan`` / ``buckets_in`` explain the plan as a table (bucket, layers, params, bytes).

Row-sparse gradients (``is_sparse`` embeddings) are never bucketed: data-parallel gives each a
``c_allgather_rows`` of its own (a flat buffer of dense tensors cannot hold rows whose count
only the run knows), as Paddle's fuse_all_reduce leaves sparse gradients out. The pass says
so (``skipped: c_allgather_rows: ...``) and the plan lists them under ``left out``.
"""

from __future__ import annotations

from pydantic import Field

from ..ir.graph import Graph
from .infra.base import Pass, PassContext, register_pass
from .infra.buckets import (  # noqa: F401  (the bucket plan's public names, kept here too)
    GRADIENT_FUSED,
    MB,
    PARAMETER_FUSED,
    PER_MEMBER_ATTRS,
    SPARSE_EXCHANGE,
    SPARSE_WHY,
    Bucket,
    BucketPlan,
    GraphPlan,
    Item,
    bucket_plan,
    buckets_in,
    fuse_buckets,
    layer_of,
    nbytes,
    param_of,
    plan_buckets,
    plan_graph,
    ready_order,
    sparse_left_out,
)


@register_pass
class FuseAllReduceOps(Pass):
    """Bucket gradient all-reduces (reduce-scatters) into fused collectives."""

    name = "fuse-all-reduce-ops"
    regions = "decline"
    regions_reason = ("collectives inside a body run once per iteration of one XLA loop; the "
                      "pass works on the outer graph's collectives, where a region op is one op")
    max_mb: float = Field(32.0, gt=0)  # BuildStrategy.fuse_grad_size_in_MB
    max_layers: int = Field(0, ge=0)  # BuildStrategy.fuse_grad_size_in_TFLOPS; 0: no bound

    def run(self, graph: Graph, ctx: PassContext) -> None:
        fuse_buckets(graph, ctx, GRADIENT_FUSED, self.max_mb, self.max_layers)
