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
from ..ir.opdef import CONTROL_SLOT
from .infra.base import Pass, PassContext, register_pass


def _frozen_stats(op: Op) -> bool:
    return bool(op.attrs.get("is_test") or op.attrs.get("use_global_stats"))


@register_pass
class SyncBatchNorm(Pass):
    """Compute training batch_norm statistics over all data-parallel replicas."""

    name = "sync-batch-norm"
    nranks: int = 0  # 0: the device count the pipeline runs for

    def run(self, graph: Graph, ctx: PassContext) -> None:
        nranks = self.nranks or ctx.num_devices
        bns = [op for op in graph.ops() if op.type == "batch_norm"]
        if nranks <= 1:
            if bns:
                ctx.decline("one replica: batch statistics are already global", len(bns))
            return
        synced = set()
        for bn in bns:
            if _frozen_stats(bn):
                ctx.decline("is_test or use_global_stats: running statistics, nothing to sync")
                continue
            if bn.input("X").type.lod_level:  # sync_batch_norm has no LoD rule (docs/lod.md)
                ctx.decline("batch_norm on a LoD value: statistics stay per replica")
                continue
            saved = [v for v in (bn.output("SavedMean"), bn.output("SavedVariance")) if v]
            grads = [u for v in saved for u in graph.user_ops(v) if u.type == "batch_norm_grad"]
            self._replace(ctx, bn, "sync_batch_norm", nranks)
            ctx.count("synced")
            for g in dict.fromkeys(grads):  # unique, in order
                self._replace(ctx, g, "sync_batch_norm_grad", nranks)
                ctx.count("synced grad")
            synced.update(saved)
        for op in graph.ops():
            if op.type == "batch_norm_grad" and not _frozen_stats(op) and not (
                    {op.input("SavedMean"), op.input("SavedVariance")} & synced) \
                    and not op.input("X").type.lod_level:
                ctx.decline("batch_norm_grad without its forward batch_norm")

    @staticmethod
    def _replace(ctx: PassContext, op: Op, new_type: str, nranks: int) -> Op:
        """The same op under ``new_type``: same inputs (control deps too), outputs and attrs."""
        inputs = {s: list(vs) for s, vs in op.inputs.items()}
        outputs = {s: list(vs) for s, vs in op.outputs.items()}
        inputs.setdefault(CONTROL_SLOT, [])
        rw = ctx.rewriter
        rw.erase_op(op, erase_outputs=False)
        return rw.create_op(new_type, inputs, outputs, {**op.attrs, "nranks": nranks},
                            derived_from=[op])
