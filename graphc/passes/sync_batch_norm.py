"""sync-batch-norm: training-mode batch_norm (and its grad) into sync_batch_norm, whose batch
statistics are taken over every data-parallel replica's slice of the batch.

Matches: each ``batch_norm`` computing batch statistics, and every ``batch_norm_grad`` reading
its saved statistics (``SavedMean``/``SavedVariance``). Both become their sync forms with the
same slots, attributes and values plus ``nranks``: the forward and its gradient must agree on
which samples the statistics cover, so they are converted together. Runs before the fusions
(fuse-bn-act fuses plain batch_norm only and reports sync ones as declined).

Declines (``skipped: ...``): ``is_test`` or ``use_global_stats`` (the running statistics are
used, nothing to synchronise); one replica (nothing to synchronise); a batch_norm_grad whose
forward op is not a batch_norm of this graph. Stats: ``synced``, ``synced grad``.
"""

from __future__ import annotations

from ..ir.graph import Graph, Op
from .infra.base import Pass, PassContext, register_pass
from .infra.driver import run_patterns
from .infra.guards import Check, DenseValue, Never
from .infra.pattern import Match, Node, Pattern
from .infra.rewrite import retype


def _frozen_stats(op: Op) -> bool:
    return bool(op.attrs.get("is_test") or op.attrs.get("use_global_stats"))


def _dynamic(op: Op, m: Match) -> bool:
    return not _frozen_stats(op) and not op.input("X").type.lod_level


# the forward op and, as a second root, every batch_norm_grad reading its saved statistics
_BN = Node("bn", "batch_norm", ins={"X": "x"}, outs={"SavedMean?": "saved_mean"})
_GRADS = Node("grads", "batch_norm_grad", ins={"*": "saved_mean"}, many=True)
_ONE_REPLICA = Pattern("one replica", (_BN,),
                       (Never("one replica: batch statistics are already global"),))
_ORPHAN_GRAD = Pattern("orphan grad", (Node("grad", "batch_norm_grad", where=_dynamic),),
                       (Never("batch_norm_grad without its forward batch_norm"),))


def _sync(nranks: int) -> Pattern:
    def rewrite(m: Match, ctx: PassContext) -> None:
        retype(ctx, m.bn, "sync_batch_norm", nranks=nranks)
        ctx.count("synced")
        for g in m.grads:
            retype(ctx, g, "sync_batch_norm_grad", nranks=nranks)
            ctx.count("synced grad")

    return Pattern("sync", (_BN, _GRADS), (
        Check(lambda m, ctx: not _frozen_stats(m.bn),
              "is_test or use_global_stats: running statistics, nothing to sync"),
        # sync_batch_norm has no LoD rule (docs/lod.md)
        DenseValue("x", "batch_norm on a LoD value: statistics stay per replica"),
    ), rewrite)


@register_pass
class SyncBatchNorm(Pass):
    """Compute training batch_norm statistics over all data-parallel replicas."""

    name = "sync-batch-norm"
    regions = "decline"
    regions_reason = ("a batch_norm inside a body keeps per-replica statistics: its gradient is "
                      "the region op's own, not a batch_norm_grad")
    nranks: int = 0  # 0: the device count the pipeline runs for

    def run(self, graph: Graph, ctx: PassContext) -> None:
        nranks = self.nranks or ctx.num_devices
        if nranks <= 1:
            run_patterns(graph, ctx, [_ONE_REPLICA])
        else:
            run_patterns(graph, ctx, [_sync(nranks)], [_ORPHAN_GRAD])
