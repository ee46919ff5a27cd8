"""Paddle 1.8's other optimizer ops, with its slots, attributes and formulas: adagrad,
decayed_adagrad, adamax, adadelta, rmsprop, lamb, lars_momentum and ftrl."""

from __future__ import annotations

from ...ir.opdef import NO_GRAD, OPTIMIZER, STATEFUL, WHOLE_TENSOR, register
from ...ir.types import FLOAT_DTYPES

_TRAITS = (OPTIMIZER, STATEFUL, NO_GRAD)
# Optimizers whose update of one element reads a norm over the whole parameter (LAMB's trust
# ratio, LARS's local learning rate): an update of a shard is not the shard of the update.
LAYERWISE_OPTIMIZERS = frozenset({"lamb", "lars_momentum"})


def _infer(state: tuple[str, ...], lr: bool = True):
    """Shape inference for an update of Param from Grad with per-element ``state`` slots
    (each one's output is ``<slot>Out`` unless the op names it otherwise below)."""

    def infer(c):
        p, g = c.x("Param"), c.x("Grad")
        c.check(p.shape == g.shape, f"Param {list(p.shape)} and Grad {list(g.shape)} differ")
        c.check(p.dtype in FLOAT_DTYPES, f"Param must be floating point, got {p.dtype}")
        if lr:
            shape = c.x("LearningRate").shape
            c.check(shape in ((1,), ()), f"LearningRate must be [1], got {list(shape)}")
        out = {"ParamOut": p}
        for slot in state:
            s = c.x(slot)
            c.check(s.shape == p.shape, f"{slot} {list(s.shape)} must match Param "
                                        f"{list(p.shape)}")
            out[_OUT_NAMES.get(slot, f"{slot}Out")] = s
        return out

    return infer


_OUT_NAMES = {"SquaredAccumulator": "SquaredAccumOut", "LinearAccumulator": "LinearAccumOut"}


def _inplace(state: tuple[str, ...]) -> dict[str, str]:
    return {"ParamOut": "Param", **{_OUT_NAMES.get(s, f"{s}Out"): s for s in state}}


def _register(op_type, inputs, state, attrs, doc, lr=True, sparse=True):
    outputs = " ".join(["ParamOut", *(_OUT_NAMES.get(s, f"{s}Out") for s in state)])
    traits = _TRAITS + ((WHOLE_TENSOR,) if op_type in LAYERWISE_OPTIMIZERS else ())
    register(op_type, inputs, outputs, attrs, infer=_infer(state, lr), traits=traits,
             inplace=_inplace(state), sparse_inputs=("Grad",) if sparse else (), doc=doc)


# Each takes a row-sparse Grad (an is_sparse embedding's); docs/sparse.md says how.
_register("adagrad", "Param Grad Moment LearningRate", ("Moment",),
          {"epsilon": ("float", 1e-6)},
          "m += g*g; p -= lr*g / (sqrt(m) + epsilon) (row-sparse g: only its rows, which is "
          "the dense update)")
_register("decayed_adagrad", "Param Grad Moment LearningRate", ("Moment",),
          {"decay": ("float", 0.95), "epsilon": ("float", 1e-6)},
          "m = decay*m + (1-decay)*g*g; p -= lr*g / (sqrt(m) + epsilon)")
_register("adamax", "Param Grad LearningRate Moment InfNorm Beta1Pow", ("Moment", "InfNorm"),
          {"beta1": ("float", 0.9), "beta2": ("float", 0.999), "epsilon": ("float", 1e-8)},
          "m = b1*m + (1-b1)*g; u = max(b2*u + epsilon, |g|); p -= lr/(1-Beta1Pow) * m/u "
          "(Beta1Pow is advanced by a separate scale op, as in Paddle)")
_register("adadelta", "Param Grad AvgSquaredGrad AvgSquaredUpdate",
          ("AvgSquaredGrad", "AvgSquaredUpdate"),
          {"rho": ("float", 0.95), "epsilon": ("float", 1e-6)},
          "E[g2] = rho*E[g2] + (1-rho)*g*g; d = -sqrt((E[dx2] + eps)/(E[g2] + eps))*g; "
          "E[dx2] = rho*E[dx2] + (1-rho)*d*d; p += d (no learning rate, as Paddle 1.8)", lr=False)
_register("rmsprop", "Param Grad Moment MeanSquare MeanGrad LearningRate",
          ("Moment", "MeanSquare", "MeanGrad"),
          {"epsilon": ("float", 1e-10), "decay": ("float", 0.9), "momentum": ("float", 0.0),
           "centered": ("bool", False)},
          "ms = decay*ms + (1-decay)*g*g; centered: mg = decay*mg + (1-decay)*g and "
          "v = momentum*v + lr*g/sqrt(ms - mg*mg + eps), else v = momentum*v + "
          "lr*g/sqrt(ms + eps); p -= v")
_register("lamb", "Param Grad LearningRate Moment1 Moment2 Beta1Pow Beta2Pow",
          ("Moment1", "Moment2"),
          {"beta1": ("float", 0.9), "beta2": ("float", 0.999), "epsilon": ("float", 1e-6),
           "weight_decay": "float"},
          "m1, m2 as Adam without bias correction (Paddle 1.8 reads but does not use the beta "
          "powers); r = m1/(sqrt(m2)+eps) + weight_decay*p; p -= lr * (|p|/|r| if both > 0 "
          "else 1) * r")
_register("lars_momentum", "Param Grad Velocity LearningRate", ("Velocity",),
          {"mu": "float", "lars_coeff": ("float", 0.001), "lars_weight_decay": ("float", 5e-4)},
          "local_lr = lr*lars_coeff*|p| / (|g| + lars_weight_decay*|p|) when both norms > 0, "
          "else lr; v = mu*v + local_lr*(g + lars_weight_decay*p); p -= v")
_register("ftrl", "Param SquaredAccumulator LinearAccumulator Grad LearningRate",
          ("SquaredAccumulator", "LinearAccumulator"),
          {"l1": ("float", 0.0), "l2": ("float", 0.0), "lr_power": ("float", -0.5)},
          "FTRL-proximal (Paddle's kernel, l1 and l2 each + 1e-10); a row-sparse Grad updates "
          "only its rows, as Paddle's sparse kernel")
