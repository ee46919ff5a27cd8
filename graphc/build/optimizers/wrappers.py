"""Paddle 1.8's Dpsgd optimizer and its two optimizers that wrap another: Lookahead (slow and
fast weights) and Recompute (Paddle's activation recomputation; on XLA a correct wrapper)."""

from __future__ import annotations

from ...ir.default_programs import default_startup_program
from ...ir.errors import ProgramError
from ...ir.program import Variable
from .adaptive import _float
from .base import Optimizer


class Dpsgd(Optimizer):
    """Differentially private SGD (Paddle's dpsgd op): the gradient is scaled down to norm
    ``clip`` when longer, one Gaussian draw n ~ N(0, sigma^2) per parameter and step is added
    as n / batch_size, then param -= lr * that. Draws follow graphc's seeded random ops
    (Paddle's kernel seeds from the clock, so its runs cannot be repeated)."""

    type = "dpsgd"

    def __init__(self, learning_rate=0.001, clip=0.9, batch_size=0.999, sigma=1e-8,
                 parameter_list=None):
        super().__init__(learning_rate, parameter_list)
        self._clip = _float("Dpsgd", "clip", clip)
        self._batch_size = _float("Dpsgd", "batch_size", batch_size)
        self._sigma = _float("Dpsgd", "sigma", sigma)
        self._seed = 0

    def _append_update(self, block, startup, param, grad, lr):
        return block.append_op(
            self.type, {"Param": param, "Grad": grad, "LearningRate": lr}, {"ParamOut": param},
            {"clip": self._clip, "batch_size": self._batch_size, "sigma": self._sigma,
             "seed": self._seed})


class Lookahead:
    """Lookahead (Zhang et al. 2019) as Paddle 1.8: ``inner_optimizer`` updates the fast
    weights (the parameters) every step; each parameter has a slow copy ``<name>@SLOW``, set
    to the parameter after the first step, and every ``k``-th step both become
    alpha * fast + (1 - alpha) * slow. The step counter is ``@LOOKAHEAD_STEP_COUNTER@``."""

    STEP_COUNTER = "@LOOKAHEAD_STEP_COUNTER@"

    def __init__(self, inner_optimizer, alpha=0.5, k=5):
        if not isinstance(inner_optimizer, Optimizer):
            raise ProgramError(f"LookaheadOptimizer: inner_optimizer must be an optimizer, got "
                               f"{type(inner_optimizer).__name__}")
        alpha = _float("LookaheadOptimizer", "alpha", alpha)
        if not 0.0 <= alpha <= 1.0:
            raise ProgramError(f"LookaheadOptimizer: alpha must be in [0, 1], got {alpha}")
        if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
            raise ProgramError(f"LookaheadOptimizer: k must be a positive int, got {k!r}")
        self.inner_optimizer, self.alpha, self.k = inner_optimizer, alpha, k
        self.type = "lookahead"

    def minimize(self, loss, startup_program=None):
        """The inner optimizer's minimize, then the slow/fast exchange; returns its result."""
        result = self.inner_optimizer.minimize(loss, startup_program)
        startup = startup_program or default_startup_program()
        block = loss.block
        program = block.program
        sblock = startup.global_block()
        params = [p for p, _ in result[1]]
        with program.op_role_guard("optimize"):
            step = block.create_var(self.STEP_COUNTER, [1], "int64", persistable=True,
                                    stop_gradient=True)
            if self.STEP_COUNTER not in sblock.vars:
                sblock.create_var(self.STEP_COUNTER, [1], "int64", persistable=True)
                sblock.append_op("fill_constant", {}, {"Out": self.STEP_COUNTER},
                                 {"shape": [1], "dtype": "int64", "value": 0.0})
            block.append_op("increment", {"X": step}, {"Out": step}, {"step": 1.0})
            for p in params:
                slow_name = f"{p.name}@SLOW"
                slow = block.create_var(slow_name, p.shape, p.dtype, persistable=True,
                                        stop_gradient=True)
                if slow_name not in sblock.vars:
                    sblock.create_var(slow_name, p.shape, p.dtype, persistable=True)
                    # the parameter's initial value: the startup has written it by now
                    fast = sblock.var(p.name) if sblock.has_var(p.name) else \
                        sblock.create_var(p.name, p.shape, p.dtype, persistable=True)
                    sblock.append_op("assign", {"X": fast}, {"Out": slow_name})
                block.append_op("lookahead", {"Param": p, "SlowParam": slow, "Step": step},
                                {"ParamOut": p, "SlowParamOut": slow},
                                {"alpha": self.alpha, "k": self.k})
        return result


class Recompute(Optimizer):
    """Paddle's RecomputeOptimizer: the same updates as ``optimizer`` (its parameters,
    accumulators and state are the inner optimizer's). Paddle frees the activations between
    ``checkpoints`` and recomputes them in the backward pass to save memory. graphc compiles
    the whole step to one XLA program, whose scheduler keeps or rematerialises activations
    itself: the checkpoints are checked (Variables of the loss's program) and kept on the
    program, but the gradient ops are the plain ones, so results equal the inner optimizer's
    and memory use is XLA's choice."""

    def __init__(self, optimizer):
        if not isinstance(optimizer, Optimizer):
            raise ProgramError(f"RecomputeOptimizer: optimizer must be an optimizer, got "
                               f"{type(optimizer).__name__}")
        self._optimizer = optimizer
        self._checkpoints = None
        self.type = optimizer.type

    def _set_checkpoints(self, checkpoints):
        if not isinstance(checkpoints, list | tuple) or not all(
                isinstance(c, Variable | str) for c in checkpoints):
            raise ProgramError("RecomputeOptimizer: checkpoints must be a list of Variables")
        self._checkpoints = list(checkpoints)

    def load(self, stat_dict):
        raise ProgramError("RecomputeOptimizer.load is not supported (as in Paddle 1.8); use "
                           "set_dict on the inner optimizer")

    def backward(self, loss, startup_program=None, parameter_list=None, no_grad_set=None,
                 callbacks=None, checkpoints=None):
        from ..backward import append_backward
        checkpoints = checkpoints if checkpoints is not None else self._checkpoints
        if parameter_list is None:
            parameter_list = self._optimizer._parameter_list
        return append_backward(loss, parameter_list, no_grad_set, callbacks,
                               checkpoints=checkpoints)

    def apply_gradients(self, params_grads, startup_program=None, grad_clip=None):
        return self._optimizer.apply_gradients(params_grads, startup_program, grad_clip)

    def apply_optimize(self, loss, startup_program, params_grads):
        return self._optimizer.apply_optimize(loss, startup_program, params_grads)

    def get_opti_var_name_list(self):
        return self._optimizer.get_opti_var_name_list()

    def state_dict(self, scope=None):
        return self._optimizer.state_dict(scope)

    def set_dict(self, state_dict, scope=None):
        self._optimizer.set_dict(state_dict, scope)

    def minimize(self, loss, startup_program=None, parameter_list=None, no_grad_set=None,
                 grad_clip=None):
        params_grads = self.backward(loss, startup_program, parameter_list, no_grad_set)
        return self.apply_gradients(params_grads, startup_program, grad_clip), params_grads


DpsgdOptimizer, LookaheadOptimizer, RecomputeOptimizer = Dpsgd, Lookahead, Recompute
__all__ = ["Dpsgd", "Lookahead", "Recompute", "DpsgdOptimizer", "LookaheadOptimizer",
           "RecomputeOptimizer"]
