"""Optimizer and learning-rate ops with Paddle's slots and formulas (sgd, momentum, adam,
adamw) plus the step counter and schedule ops graphc's LR schedulers are built from."""

from __future__ import annotations

from ...ir.opdef import NO_GRAD, OPTIMIZER, RANDOM, STATEFUL, register
from ...ir.types import FLOAT_DTYPES, TensorType


def _check_param_grad(c):
    p, g = c.x("Param"), c.x("Grad")
    c.check(p.shape == g.shape, f"Param {list(p.shape)} and Grad {list(g.shape)} differ")
    c.check(p.dtype in FLOAT_DTYPES, f"Param must be floating point, got {p.dtype}")
    lr = c.x("LearningRate")
    c.check(lr.shape in ((1,), ()), f"LearningRate must be [1], got {list(lr.shape)}")
    return p


def _sgd(c):
    return {"ParamOut": _check_param_grad(c)}


def _momentum(c):
    p = _check_param_grad(c)
    c.check(c.x("Velocity").shape == p.shape, "Velocity must match Param")
    return {"ParamOut": p, "VelocityOut": c.x("Velocity")}


def _adam(c):
    p = _check_param_grad(c)
    for slot in ("Moment1", "Moment2"):
        c.check(c.x(slot).shape == p.shape, f"{slot} must match Param {list(p.shape)}")
    return {"ParamOut": p, "Moment1Out": c.x("Moment1"), "Moment2Out": c.x("Moment2"),
            "Beta1PowOut": c.x("Beta1Pow"), "Beta2PowOut": c.x("Beta2Pow")}


_TRAITS = (OPTIMIZER, STATEFUL, NO_GRAD)
# Every optimizer takes a row-sparse Grad (an is_sparse embedding's) without densifying it:
# sgd and momentum as Paddle's sparse kernels do (momentum still decays every velocity row),
# adam/adamw per lazy_mode (docs/sparse.md states each formula).
_SPARSE = ("Grad",)
register("sgd", "Param Grad LearningRate", "ParamOut", infer=_sgd, traits=_TRAITS,
         inplace={"ParamOut": "Param"}, sparse_inputs=_SPARSE,
         doc="ParamOut = Param - LearningRate * Grad (row-sparse Grad: only its rows move)")
register("momentum", "Param Grad Velocity LearningRate", "ParamOut VelocityOut",
         {"mu": "float", "use_nesterov": ("bool", False)}, infer=_momentum, traits=_TRAITS,
         inplace={"ParamOut": "Param", "VelocityOut": "Velocity"}, sparse_inputs=_SPARSE,
         doc="v = mu*v + g; p -= lr*v (Nesterov: p -= lr*(g + mu*v)); row-sparse g: the "
             "same, g being zero outside its rows")
_ADAM_ATTRS = {"beta1": ("float", 0.9), "beta2": ("float", 0.999),
               "epsilon": ("float", 1e-8), "lazy_mode": ("bool", False)}
_ADAM_SLOTS = ("Param Grad LearningRate Moment1 Moment2 Beta1Pow Beta2Pow",
               "ParamOut Moment1Out Moment2Out Beta1PowOut Beta2PowOut")
_ADAM_INPLACE = {"ParamOut": "Param", "Moment1Out": "Moment1", "Moment2Out": "Moment2",
                 "Beta1PowOut": "Beta1Pow", "Beta2PowOut": "Beta2Pow"}
register("adam", *_ADAM_SLOTS, _ADAM_ATTRS, infer=_adam, traits=_TRAITS, inplace=_ADAM_INPLACE,
         sparse_inputs=_SPARSE,
         doc="Adam with Paddle's bias correction (epsilon scaled by sqrt(1 - beta2^t)); a "
             "row-sparse Grad updates every row (zero gradient elsewhere), or with lazy_mode "
             "only its rows' moments and parameters")
register("adamw", *_ADAM_SLOTS,
         dict(_ADAM_ATTRS, coeff=("float", 0.01), lr_ratio=("float", 1.0),
              with_decay=("bool", True)),
         infer=_adam, traits=_TRAITS, inplace=_ADAM_INPLACE, sparse_inputs=_SPARSE,
         doc="Adam with decoupled weight decay: Param *= 1 - lr*lr_ratio*coeff first (with "
             "lazy_mode and a row-sparse Grad: only its rows decay)")


def _same_as_x(c):
    return {"Out": c.x("X")}


register("increment", "X", "Out", {"step": ("float", 1.0)}, infer=_same_as_x,
         traits=(NO_GRAD, STATEFUL), inplace={"Out": "X"}, doc="Out = X + step (a counter)")


def _schedule(c):
    step = c.x("Step")
    c.check(step.shape in ((1,), ()), f"Step must be [1], got {list(step.shape)}")
    return {"Out": TensorType((1,), "float32")}


register("piecewise_decay", "Step", "Out", {"boundaries": "ints", "values": "floats"},
         infer=_schedule, traits=(NO_GRAD,),
         doc="values[i] for the first boundaries[i] > step (values has one more entry)")
register("cosine_decay", "Step", "Out", {"learning_rate": "float", "step_each_epoch": "int",
                                         "epochs": "int"}, infer=_schedule, traits=(NO_GRAD,),
         doc="lr * 0.5 * (cos(floor(step / step_each_epoch) * pi / epochs) + 1)")


def _warmup(c):
    _schedule(c)
    return {"Out": c.x("LearningRate")}


register("linear_warmup", "Step LearningRate", "Out",
         {"warmup_steps": "int", "start_lr": "float", "end_lr": "float"}, infer=_warmup,
         traits=(NO_GRAD,),
         doc="start + (end - start) * step / warmup_steps while step < warmup_steps, else LR")


# -- issue 24: optimizers (dpsgd; lookahead's slow/fast weight exchange)
register("dpsgd", "Param Grad LearningRate", "ParamOut",
         {"clip": ("float", 10.0), "batch_size": ("float", 16.0), "sigma": ("float", 1.0),
          "seed": ("int", 0)},
         infer=_sgd, traits=(OPTIMIZER, STATEFUL, NO_GRAD, RANDOM),
         inplace={"ParamOut": "Param"},
         doc="Paddle's dpsgd: scale = max(1, |Grad|_2 / clip); one scalar noise n ~ N(0, "
             "sigma^2) per op and step; ParamOut = Param - lr * (Grad / scale + n / batch_size)")


def _lookahead(c):
    p, slow = c.x("Param"), c.x("SlowParam")
    c.check(slow.shape == p.shape, f"SlowParam {list(slow.shape)} must match Param "
                                   f"{list(p.shape)}")
    step = c.x("Step")
    c.check(step.shape in ((1,), ()), f"Step must be [1], got {list(step.shape)}")
    return {"ParamOut": p, "SlowParamOut": slow}


register("lookahead", "Param SlowParam Step", "ParamOut SlowParamOut",
         {"alpha": ("float", 0.5), "k": ("int", 5)}, infer=_lookahead,
         traits=(STATEFUL, NO_GRAD),
         inplace={"ParamOut": "Param", "SlowParamOut": "SlowParam"},
         doc="Paddle's LookaheadOptimizer after the inner update of step t (counted from 1): "
             "t == 1: slow = fast; else every k-th t: slow = fast = alpha*fast + "
             "(1-alpha)*slow; otherwise nothing")
