"""BuildStrategy -> ordered pass list. The order follows Paddle's build_strategy.cc, with
two deliberate differences, explained in ``ORDER`` below."""

from __future__ import annotations

from ..strategy import BuildStrategy, ExecutionStrategy
from .base import PassError, all_passes, make_pass
from .manager import PassManager

# (BuildStrategy field or None for always, pass name). Paddle's order, except:
#  - dce first: later passes then see only what is computed (Paddle relies on its executor);
#  - sequential-execution and backward-optimizer-op-deps come AFTER the fusions. Paddle adds
#    control dependencies first, so every fusion must carry them along and an intermediate
#    with a control use looks shared; adding them last means fusions never see them, and the
#    chain is built over the ops that actually run (Paddle's fuse_all_optimizer_ops +
#    enable_sequential_execution cycle, PaddlePaddle issue 18876, cannot happen).
#  - the in-place plan runs last (Paddle applies its memory passes in the executor, after).
ORDER: list[tuple[str | None, str]] = [
    (None, "dce"),
    ("amp", "amp"),
    ("fuse_relu_depthwise_conv", "fuse-relu-depthwise-conv"),
    ("fuse_bn_act_ops", "fuse-bn-act"),
    ("fuse_elewise_add_act_ops", "fuse-elewise-add-act"),
    ("fuse_all_optimizer_ops", "fuse-all-optimizer-ops"),
    ("enable_backward_optimizer_op_deps", "backward-optimizer-op-deps"),
    ("enable_sequential_execution", "sequential-execution"),
    ("enable_inplace", "enable-inplace"),
    ("memory_optimize", "memory-optimize"),
]


def passes_for(build_strategy: BuildStrategy | None, num_devices: int = 1) -> list:
    bs = (build_strategy or BuildStrategy()).resolve(num_devices)
    available = all_passes()
    passes = []
    for field_name, pass_name in ORDER:
        if field_name is not None and not getattr(bs, field_name):
            continue
        if pass_name == "enable-inplace" and bs.memory_optimize:
            continue  # memory-optimize's plan includes the in-place pairs; plan once
        if pass_name not in available:
            raise PassError(f"BuildStrategy.{field_name} needs the pass '{pass_name}', which "
                            "graphc does not have yet")
        passes.append(make_pass(pass_name))
    return passes


def pipeline_for(build_strategy: BuildStrategy | None = None,
                 exec_strategy: ExecutionStrategy | None = None, num_devices: int = 1,
                 **instrumentation) -> PassManager:
    """The PassManager a BuildStrategy asks for; ``instrumentation`` goes to PassManager.
    ``build_strategy.verify_each_pass`` turns on verification after every pass."""
    bs = build_strategy or BuildStrategy()
    instrumentation.setdefault("verify_each", bs.verify_each_pass)
    return PassManager(passes_for(bs, num_devices), **instrumentation)
