"""Paddle 1.8's other optimizers (Adagrad, DecayedAdagrad, Adamax, Adadelta, RMSProp, Lamb,
LarsMomentum, Ftrl) with its signatures, defaults and accumulator names; re-exported by
graphc.optimizer. Their ops and formulas: graphc/ops/adaptive_optimizer/."""

from __future__ import annotations

from ...ir.errors import ProgramError
from .base import Optimizer


def _float(owner: str, name: str, value) -> float:
    """A hyper-parameter as a float, or a ProgramError naming it."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProgramError(f"{owner}: {name} must be a float, got {value!r}")
    return float(value)


class Adagrad(Optimizer):
    """moment += g*g; param -= lr * g / (sqrt(moment) + epsilon). Accumulator ``moment``
    starts at ``initial_accumulator_value``."""

    type = "adagrad"

    _moment_acc_str = "moment"

    def __init__(self, learning_rate, epsilon=1.0e-6, parameter_list=None, regularization=None,
                 grad_clip=None, name=None, initial_accumulator_value=0.0):
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._epsilon = _float("Adagrad", "epsilon", epsilon)
        self._initial = _float("Adagrad", "initial_accumulator_value", initial_accumulator_value)

    def _append_update(self, block, startup, param, grad, lr):
        m = self._add_accumulator(block, startup, "moment", param, self._initial)
        return block.append_op(
            self.type, {"Param": param, "Grad": grad, "Moment": m, "LearningRate": lr},
            {"ParamOut": param, "MomentOut": m}, {"epsilon": self._epsilon})


class DecayedAdagrad(Optimizer):
    """moment = decay*moment + (1-decay)*g*g; param -= lr * g / (sqrt(moment) + epsilon)."""

    type = "decayed_adagrad"

    _moment_acc_str = "moment"

    def __init__(self, learning_rate, decay=0.95, epsilon=1.0e-6, parameter_list=None,
                 regularization=None, grad_clip=None, name=None):
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._decay = _float("DecayedAdagrad", "decay", decay)
        self._epsilon = _float("DecayedAdagrad", "epsilon", epsilon)

    def _append_update(self, block, startup, param, grad, lr):
        m = self._add_accumulator(block, startup, "moment", param)
        return block.append_op(
            self.type, {"Param": param, "Grad": grad, "Moment": m, "LearningRate": lr},
            {"ParamOut": param, "MomentOut": m}, {"epsilon": self._epsilon, "decay": self._decay})


class Adamax(Optimizer):
    """Adam with the infinity norm: accumulators ``moment``, ``inf_norm`` and
    ``beta1_pow_acc``, the last advanced by a ``scale`` op after the update (as Paddle)."""

    type = "adamax"

    _moment_acc_str = "moment"
    _inf_norm_acc_str = "inf_norm"
    _beta1_pow_acc_str = "beta1_pow_acc"

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 parameter_list=None, regularization=None, grad_clip=None, name=None):
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._beta1 = _float("Adamax", "beta1", beta1)
        self._beta2 = _float("Adamax", "beta2", beta2)
        self._epsilon = _float("Adamax", "epsilon", epsilon)

    def _append_update(self, block, startup, param, grad, lr):
        m = self._add_accumulator(block, startup, "moment", param)
        u = self._add_accumulator(block, startup, "inf_norm", param)
        b1 = self._add_accumulator(block, startup, "beta1_pow_acc", param, self._beta1, [1])
        op = block.append_op(
            self.type, {"Param": param, "Grad": grad, "LearningRate": lr, "Moment": m,
                        "InfNorm": u, "Beta1Pow": b1},
            {"ParamOut": param, "MomentOut": m, "InfNormOut": u},
            {"beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon})
        block.append_op("scale", {"X": b1}, {"Out": b1}, {"scale": self._beta1})
        return op


class Adadelta(Optimizer):
    """Adadelta as Paddle 1.8's kernel: the step is -sqrt((E[dx^2]+eps)/(E[g^2]+eps)) * g,
    and ``learning_rate`` is accepted but not used (Paddle's op has no learning-rate input).
    Accumulators ``_avg_squared_grad`` and ``_avg_squared_update``."""

    type = "adadelta"

    _avg_squared_grad_acc_str = "_avg_squared_grad"
    _avg_squared_update_acc_str = "_avg_squared_update"

    def __init__(self, learning_rate, epsilon=1.0e-6, rho=0.95, parameter_list=None,
                 regularization=None, grad_clip=None, name=None):
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._epsilon = _float("Adadelta", "epsilon", epsilon)
        self._rho = _float("Adadelta", "rho", rho)

    def _param_lr(self, block, param, lr):
        return lr  # unused by the op: no per-parameter scale op to build

    def _append_update(self, block, startup, param, grad, lr):
        sq_grad = self._add_accumulator(block, startup, "_avg_squared_grad", param)
        sq_update = self._add_accumulator(block, startup, "_avg_squared_update", param)
        return block.append_op(
            self.type, {"Param": param, "Grad": grad, "AvgSquaredGrad": sq_grad,
                        "AvgSquaredUpdate": sq_update},
            {"ParamOut": param, "AvgSquaredGradOut": sq_grad,
             "AvgSquaredUpdateOut": sq_update}, {"epsilon": self._epsilon, "rho": self._rho})


class RMSProp(Optimizer):
    """mean_square = rho*ms + (1-rho)*g*g; momentum = mu*momentum + lr*g/sqrt(ms + eps)
    (centered: ms - mean_grad^2 under the root); param -= momentum. Accumulators
    ``momentum``, ``mean_square``, ``mean_grad``."""

    type = "rmsprop"

    _momentum_acc_str = "momentum"
    _mean_square_acc_str = "mean_square"
    _mean_grad_acc_str = "mean_grad"

    def __init__(self, learning_rate, rho=0.95, epsilon=1.0e-6, momentum=0.0, centered=False,
                 parameter_list=None, regularization=None, grad_clip=None, name=None):
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._rho = _float("RMSProp", "rho", rho)
        self._epsilon = _float("RMSProp", "epsilon", epsilon)
        self._momentum = _float("RMSProp", "momentum", momentum)
        self._centered = bool(centered)

    def _append_update(self, block, startup, param, grad, lr):
        v = self._add_accumulator(block, startup, "momentum", param)
        ms = self._add_accumulator(block, startup, "mean_square", param)
        mg = self._add_accumulator(block, startup, "mean_grad", param)
        return block.append_op(
            self.type, {"Param": param, "Grad": grad, "Moment": v, "MeanSquare": ms,
                        "MeanGrad": mg, "LearningRate": lr},
            {"ParamOut": param, "MomentOut": v, "MeanSquareOut": ms, "MeanGradOut": mg},
            {"epsilon": self._epsilon, "decay": self._rho, "momentum": self._momentum,
             "centered": self._centered})


class Lamb(Optimizer):
    """LAMB as Paddle 1.8: Adam's moments (``moment1``, ``moment2``; its ``beta1_pow_acc`` and
    ``beta2_pow_acc`` are created and passed but, as in Paddle 1.8, neither used nor
    advanced), r = m1/(sqrt(m2)+eps) + lamb_weight_decay*param, and a layer-wise trust ratio
    |param|/|r|. ``exclude_from_weight_decay_fn(param)`` -> True: no decay for that one."""

    type = "lamb"

    _moment1_acc_str = "moment1"
    _moment2_acc_str = "moment2"
    _beta1_pow_acc_str = "beta1_pow_acc"
    _beta2_pow_acc_str = "beta2_pow_acc"

    def __init__(self, learning_rate=0.001, lamb_weight_decay=0.01, beta1=0.9, beta2=0.999,
                 epsilon=1e-6, parameter_list=None, regularization=None, grad_clip=None,
                 exclude_from_weight_decay_fn=None, name=None):
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._weight_decay = _float("Lamb", "lamb_weight_decay", lamb_weight_decay)
        self._beta1 = _float("Lamb", "beta1", beta1)
        self._beta2 = _float("Lamb", "beta2", beta2)
        self._epsilon = _float("Lamb", "epsilon", epsilon)
        self._exclude_fn = exclude_from_weight_decay_fn

    def _append_update(self, block, startup, param, grad, lr):
        m1 = self._add_accumulator(block, startup, "moment1", param)
        m2 = self._add_accumulator(block, startup, "moment2", param)
        b1 = self._add_accumulator(block, startup, "beta1_pow_acc", param, self._beta1, [1])
        b2 = self._add_accumulator(block, startup, "beta2_pow_acc", param, self._beta2, [1])
        excluded = self._exclude_fn is not None and bool(self._exclude_fn(param))
        return block.append_op(
            self.type, {"Param": param, "Grad": grad, "LearningRate": lr, "Moment1": m1,
                        "Moment2": m2, "Beta1Pow": b1, "Beta2Pow": b2},
            {"ParamOut": param, "Moment1Out": m1, "Moment2Out": m2},
            {"beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon,
             "weight_decay": 0.0 if excluded else self._weight_decay})


class LarsMomentum(Optimizer):
    """Momentum with LARS's layer-wise learning rate
    lr * lars_coeff * |param| / (|g| + lars_weight_decay * |param|). Accumulator ``velocity``."""

    type = "lars_momentum"

    _velocity_acc_str = "velocity"

    def __init__(self, learning_rate, momentum, lars_coeff=0.001, lars_weight_decay=0.0005,
                 parameter_list=None, regularization=None, grad_clip=None, name=None):
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._momentum = _float("LarsMomentum", "momentum", momentum)
        self._lars_coeff = _float("LarsMomentum", "lars_coeff", lars_coeff)
        self._lars_weight_decay = _float("LarsMomentum", "lars_weight_decay", lars_weight_decay)

    def _append_update(self, block, startup, param, grad, lr):
        v = self._add_accumulator(block, startup, "velocity", param)
        return block.append_op(
            self.type, {"Param": param, "Grad": grad, "Velocity": v, "LearningRate": lr},
            {"ParamOut": param, "VelocityOut": v},
            {"mu": self._momentum, "lars_coeff": self._lars_coeff,
             "lars_weight_decay": self._lars_weight_decay})


class Ftrl(Optimizer):
    """FTRL-proximal with accumulators ``squared`` and ``linear``. Unlike Paddle 1.8, whose
    Python passed ``l1`` as the op's ``l2`` (fixed in 2.0), ``l2`` is used as given."""

    type = "ftrl"

    _squared_acc_str = "squared"
    _linear_acc_str = "linear"

    def __init__(self, learning_rate, l1=0.0, l2=0.0, lr_power=-0.5, parameter_list=None,
                 regularization=None, grad_clip=None, name=None):
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._l1 = _float("Ftrl", "l1", l1)
        self._l2 = _float("Ftrl", "l2", l2)
        self._lr_power = _float("Ftrl", "lr_power", lr_power)

    def _append_update(self, block, startup, param, grad, lr):
        sq = self._add_accumulator(block, startup, "squared", param)
        lin = self._add_accumulator(block, startup, "linear", param)
        return block.append_op(
            self.type, {"Param": param, "SquaredAccumulator": sq, "LinearAccumulator": lin,
                        "Grad": grad, "LearningRate": lr},
            {"ParamOut": param, "SquaredAccumOut": sq, "LinearAccumOut": lin},
            {"l1": self._l1, "l2": self._l2, "lr_power": self._lr_power})


# Paddle's long names
AdagradOptimizer, DecayedAdagradOptimizer, AdamaxOptimizer = Adagrad, DecayedAdagrad, Adamax
AdadeltaOptimizer, RMSPropOptimizer, LambOptimizer = Adadelta, RMSProp, Lamb
LarsMomentumOptimizer, FtrlOptimizer = LarsMomentum, Ftrl

__all__ = ["Adagrad", "DecayedAdagrad", "Adamax", "Adadelta", "RMSProp", "Lamb", "LarsMomentum",
           "Ftrl", "AdagradOptimizer", "DecayedAdagradOptimizer", "AdamaxOptimizer",
           "AdadeltaOptimizer", "RMSPropOptimizer", "LambOptimizer", "LarsMomentumOptimizer",
           "FtrlOptimizer"]
