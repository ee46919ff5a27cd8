"""Paddle's DGCMomentumOptimizer (deep gradient compression, Lin et al. 2018) on graphc: one
``dgc_momentum`` op per large float32 parameter, plain ``momentum`` for the others."""

from __future__ import annotations

import math

from ...ir.default_programs import default_startup_program
from ...ir.errors import ProgramError
from ...ir.source import user_source
from ..clip import GradientClipByNorm, append_gradient_clip_ops
from ..regularizer import L1Decay, L2Decay
from .base import Optimizer

# Paddle's names for the step counter (core.dgc.kDGCCounterName) and the threshold below
# which a parameter is updated by plain momentum (DGCMomentumOptimizer._is_use_dgc)
COUNTER = "__g_dgc_counter__"
MIN_NUMEL = 16384


class DGCMomentum(Optimizer):
    """Momentum until step ``rampup_begin_step``; from then on each large parameter (float32,
    >= 16384 entries) keeps u = mu*u + g and v = v + u (Nesterov: u = mu*(u + g),
    v = v + u + g), applies only the top-k entries of v by magnitude (param -= lr * v there)
    and clears u and v there; k = numel * (1 - sparsity[i]), i stepping through
    ``sparsity`` over ``rampup_step`` steps. ``grad_clip`` (GradientClipByNorm) clips each
    large parameter's gradient to clip_norm / sqrt(num_trainers) from the ramp-up on (Paddle's
    local clip); ``regularization`` (L1Decay/L2Decay) is added inside the op.

    graphc picks the exact top-k (Paddle's k_select estimates the threshold by sampling).
    With several data-parallel replicas graphc all-reduces (means) the dense gradient before
    the update, so every replica compresses the same mean gradient: the update is that of
    one trainer on the whole batch, not Paddle's sum of each trainer's own top-k entries.
    """

    type = "dgc_momentum"

    _u_velocity_acc_str = "_dgc_u_"
    _v_velocity_acc_str = "_dgc_v_"

    def __init__(self, learning_rate, momentum, rampup_begin_step, rampup_step=1,
                 sparsity=[0.999], parameter_list=None, use_nesterov=False,  # noqa: B006
                 num_trainers=None, regularization=None, grad_clip=None, name=None):
        super().__init__(learning_rate, parameter_list, regularization, None, name)
        if rampup_begin_step is None or rampup_begin_step < 0:
            raise ProgramError(f"DGCMomentumOptimizer: rampup_begin_step must be >= 0, got "
                               f"{rampup_begin_step!r}")
        if rampup_step is None or rampup_step <= 0:
            raise ProgramError(f"DGCMomentumOptimizer: rampup_step must be > 0, got "
                               f"{rampup_step!r}")
        sparsity = [float(s) for s in sparsity]
        if not sparsity or not all(0.0 < s < 1.0 for s in sparsity):
            raise ProgramError(f"DGCMomentumOptimizer: sparsity must be ratios in (0, 1), got "
                               f"{sparsity}")
        self._momentum, self._use_nesterov = float(momentum), bool(use_nesterov)
        self._rampup_begin_step, self._rampup_step = float(rampup_begin_step), float(rampup_step)
        self._sparsity = sparsity
        self._clip_norm = -1.0
        self._dgc_grad_clip = grad_clip
        if grad_clip is not None:
            if not isinstance(grad_clip, GradientClipByNorm):
                raise ProgramError("DGCMomentumOptimizer: grad_clip must be a "
                                   "GradientClipByNorm, as in Paddle")
            if isinstance(num_trainers, bool) or not isinstance(num_trainers, int) or \
                    num_trainers <= 0:
                raise ProgramError("DGCMomentumOptimizer: grad_clip needs num_trainers, a "
                                   f"positive int, got {num_trainers!r}")
            self._clip_norm = grad_clip.clip_norm / math.sqrt(num_trainers)
        self._regular_type, self._regular_coeff = 0, 0.0
        if regularization is not None:
            if not isinstance(regularization, L1Decay | L2Decay):
                raise ProgramError("DGCMomentumOptimizer: regularization must be None, L1Decay "
                                   "or L2Decay")
            self._regular_type = 1 if isinstance(regularization, L1Decay) else 2
            self._regular_coeff = regularization.coeff
        self._counter = None

    @staticmethod
    def _uses_dgc(param, grad) -> bool:
        return (math.prod(abs(int(d)) for d in param.shape) >= MIN_NUMEL
                and param.dtype == "float32" and not grad.selected_rows)

    def apply_gradients(self, params_grads, startup_program=None, grad_clip=None):
        """Small parameters: clip, regularise, momentum (Paddle's order); large ones: the
        dgc_momentum op, which clips and regularises itself."""
        if not params_grads:
            return []
        block = params_grads[0][0].block
        program = block.program
        startup = startup_program or default_startup_program()
        params_grads = sorted(params_grads, key=lambda pg: pg[0].name)
        small = [pg for pg in params_grads if not self._uses_dgc(*pg)]
        large = [pg for pg in params_grads if self._uses_dgc(*pg)]
        where = user_source()
        ops = []
        with program.op_role_guard("optimize"), program.source_guard(where), \
                startup.source_guard(where):
            clip = grad_clip if grad_clip is not None else self._dgc_grad_clip
            small = append_gradient_clip_ops(small, clip)
            for param, grad in small:
                reg = param.regularizer if param.regularizer is not None else \
                    self.regularization
                if reg is not None:
                    reg.append(block, param, grad)
            # the step counter starts at -1 and counts before any update reads it (Paddle
            # prepends its increment to the main program): 0 on the first step
            self._counter = self._global_var(block, startup, COUNTER, [1], "float32", -1.0)
            block.append_op("increment", {"X": self._counter}, {"Out": self._counter},
                            {"step": 1.0})
            lr = self._create_lr(block, startup)
            for param, grad in sorted(small + large, key=lambda pg: pg[0].name):
                ops.append(self._append_update(block, startup, param, grad,
                                               self._param_lr(block, param, lr)))
        return ops

    def _append_update(self, block, startup, param, grad, lr):
        u = self._add_accumulator(block, startup, "_dgc_u_", param)
        if not self._uses_dgc(param, grad):
            return block.append_op(
                "momentum", {"Param": param, "Grad": grad, "Velocity": u, "LearningRate": lr},
                {"ParamOut": param, "VelocityOut": u},
                {"mu": self._momentum, "use_nesterov": self._use_nesterov})
        v = self._add_accumulator(block, startup, "_dgc_v_", param)
        return block.append_op(
            "dgc_momentum", {"Param": param, "Grad": grad, "Velocity": u, "V": v,
                             "LearningRate": lr, "CurrentStep": self._counter},
            {"ParamOut": param, "VelocityOut": u, "VOut": v},
            {"mu": self._momentum, "use_nesterov": self._use_nesterov,
             "sparsity": self._sparsity, "rampup_begin_step": self._rampup_begin_step,
             "rampup_step": self._rampup_step, "regular_coeff": self._regular_coeff,
             "regular_type": self._regular_type, "clip_norm": self._clip_norm})


DGCMomentumOptimizer = DGCMomentum
__all__ = ["DGCMomentum", "DGCMomentumOptimizer"]
