"""fuse-broadcast-ops: in Reduce mode, gather the parameters back after the sharded update with
one c_fused_allgather per bucket instead of a c_allgather each (Paddle's fuse_broadcast_op).

Matches: ``c_allgather`` ops (data-parallel's Reduce mode puts one after each sharded
optimizer op, rebuilding the whole parameter as its ``ParamOut``), in the graph's order.

Buckets follow fuse-all-reduce-ops' bound exactly (its module docstring), counted on the whole
parameters gathered: the layer is the parameter name before the first '.', bytes(bucket) <=
``max_mb`` * 2**20 unless one parameter alone is larger, at most ``max_layers`` layers (0: no
bound), a layer split only when it alone exceeds the bytes, and a bucket split rather than
closing a cycle. The pipeline passes BuildStrategy.fuse_grad_size_in_MB / _TFLOPS, as for the
gradients. Produces one ``c_fused_allgather`` per bucket of two or more, with the members'
``shapes`` and ``ranks`` concatenated; its outputs ARE the members' (the updated parameters
keep their names and versions); control dependencies merged. Statistics as fuse-all-reduce-ops.
"""

from __future__ import annotations

from pydantic import Field

from ..ir.graph import Graph
from .infra.base import Pass, PassContext, register_pass
from .infra.buckets import PARAMETER_FUSED, fuse_buckets


@register_pass
class FuseBroadcastOps(Pass):
    """Bucket the parameter all-gathers of Reduce mode into fused all-gathers."""

    name = "fuse-broadcast-ops"
    regions = "decline"
    regions_reason = ("collectives inside a body run once per iteration of one XLA loop; the "
                      "pass works on the outer graph's collectives, where a region op is one op")
    max_mb: float = Field(32.0, gt=0)
    max_layers: int = Field(0, ge=0)

    def run(self, graph: Graph, ctx: PassContext) -> None:
        fuse_buckets(graph, ctx, PARAMETER_FUSED, self.max_mb, self.max_layers)
