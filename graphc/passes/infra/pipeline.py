"""BuildStrategy -> ordered pass list. The order follows Paddle's build_strategy.cc, with
two deliberate differences, explained in ``ORDER`` below."""

from __future__ import annotations

from ...strategy import BuildStrategy, ExecutionStrategy, GradientScaleStrategy, ReduceStrategy
from .base import PassError, all_passes, make_pass
from .manager import PassManager

# (BuildStrategy field or None for always, pass name). Paddle's order, except:
#  - dce first: later passes then see only what is computed (Paddle relies on its executor);
#  - sequential-execution and backward-optimizer-op-deps come AFTER the fusions. Paddle adds
#    control dependencies first, so every fusion must carry them along and an intermediate
#    with a control use looks shared; adding them last means fusions never see them, and the
#    chain is built over the ops that actually run (Paddle's fuse_all_optimizer_ops +
#    enable_sequential_execution cycle, PaddlePaddle issue 18876, cannot happen).
#  - roll-repeated-layers comes after the fusions (it rolls the fused layers: fewer body ops)
#    and before data-parallel (its collectives would end every run); in data-parallel
#    training it leaves optimizer ops alone, which the data-parallel pass must see.
#  - fuse-embedding-seq-pool (graphc's own, on by default) runs after amp, on the ops amp
#    left as they were, and before the other fusions: it takes whole lookup+pool chains.
#  - the in-place plan runs last (Paddle applies its memory passes in the executor, after).
#  - data-parallel passes run only for a data-parallel training program (loss_name given,
#    more than one device); sync-batch-norm first, as in Paddle, so the fusions see it.
ORDER: list[tuple[str | None, str]] = [
    (None, "dce"),
    ("amp", "amp"),
    ("fuse_embedding_seq_pool", "fuse-embedding-seq-pool"),
    ("sync_batch_norm", "sync-batch-norm"),
    ("fuse_relu_depthwise_conv", "fuse-relu-depthwise-conv"),
    ("fuse_bn_act_ops", "fuse-bn-act"),
    ("fuse_elewise_add_act_ops", "fuse-elewise-add-act"),
    ("roll_repeated_layers", "roll-repeated-layers"),
    (None, "data-parallel"),
    ("fuse_all_reduce_ops", "fuse-all-reduce-ops"),
    ("use_hierarchical_allreduce", "hierarchical-allreduce"),
    ("fuse_broadcast_ops", "fuse-broadcast-ops"),
    ("fuse_all_optimizer_ops", "fuse-all-optimizer-ops"),
    (None, "all-reduce-deps"),
    ("enable_backward_optimizer_op_deps", "backward-optimizer-op-deps"),
    ("enable_sequential_execution", "sequential-execution"),
    ("enable_inplace", "enable-inplace"),
    ("memory_optimize", "memory-optimize"),
]


# Passes that exist only for data-parallel training.
DATA_PARALLEL = {"sync-batch-norm", "data-parallel", "fuse-all-reduce-ops",
                 "hierarchical-allreduce", "fuse-broadcast-ops", "all-reduce-deps"}


def _options(pass_name: str, bs: BuildStrategy, num_devices: int) -> dict:
    """The pass options a strategy implies (the strategy's field -> the pass's option)."""
    if pass_name == "data-parallel":
        return {"nranks": num_devices,
                "mode": "reduce" if bs.reduce_strategy == ReduceStrategy.Reduce
                else "all_reduce",
                "reduce": "mean" if bs.gradient_scale_strategy ==
                GradientScaleStrategy.CoeffNumDevice else "sum"}
    if pass_name in ("fuse-all-reduce-ops", "fuse-broadcast-ops"):  # one bucket bound
        return {"max_mb": bs.fuse_grad_size_in_MB,
                "max_layers": int(bs.fuse_grad_size_in_TFLOPS)}
    if pass_name == "hierarchical-allreduce":
        return {"inter_nranks": bs.hierarchical_allreduce_inter_nranks}
    return bs.pass_options(pass_name)


def passes_for(build_strategy: BuildStrategy | None, num_devices: int = 1,
               loss_name: str | None = None) -> list:
    """The passes a strategy asks for; data-parallel ones only when training (``loss_name``)
    on more than one device."""
    bs = (build_strategy or BuildStrategy()).resolve(num_devices)
    available = all_passes()
    passes = []
    training_dp = loss_name is not None and num_devices > 1
    for field_name, pass_name in ORDER:
        if field_name is not None and not getattr(bs, field_name):
            continue
        if pass_name in DATA_PARALLEL and not training_dp:
            continue
        if pass_name == "enable-inplace" and bs.memory_optimize:
            continue  # memory-optimize's plan includes the in-place pairs; plan once
        if pass_name not in available:
            raise PassError(f"BuildStrategy.{field_name} needs the pass '{pass_name}', which "
                            "graphc does not have yet")
        options = _options(pass_name, bs, num_devices)
        if pass_name == "roll-repeated-layers" and training_dp:
            options["roll_optimizer"] = False
        passes.append(make_pass(pass_name, **options))
    return passes


def pipeline_for(build_strategy: BuildStrategy | None = None,
                 exec_strategy: ExecutionStrategy | None = None, num_devices: int = 1,
                 loss_name: str | None = None, **instrumentation) -> PassManager:
    """The PassManager a BuildStrategy asks for; ``instrumentation`` goes to PassManager.
    ``build_strategy.verify_each_pass`` turns on verification after every pass."""
    bs = build_strategy or BuildStrategy()
    instrumentation.setdefault("verify_each", bs.verify_each_pass)
    return PassManager(passes_for(bs, num_devices, loss_name), **instrumentation)
