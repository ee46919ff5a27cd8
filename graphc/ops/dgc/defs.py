"""``dgc_momentum``: Paddle's dgc op (clip, regularisation, momentum correction, top-k of |V|,
masking) and dgc_momentum op (momentum before the ramp-up, SGD after) as one optimizer op."""

from __future__ import annotations

from ...ir.opdef import NO_GRAD, OPTIMIZER, STATEFUL, WHOLE_TENSOR, register
from ..optimizer.defs import _check_param_grad


def _dgc_momentum(c):
    p = _check_param_grad(c)
    for slot in ("Velocity", "V"):
        c.check(c.x(slot).shape == p.shape, f"{slot} must match Param {list(p.shape)}")
    c.check(c.x("CurrentStep").shape in ((1,), ()), "CurrentStep must be [1]")
    c.check(len(c["sparsity"]) > 0 and all(0.0 < s <= 1.0 for s in c["sparsity"]),
            f"sparsity must be a non-empty list of ratios in (0, 1], got {list(c['sparsity'])}")
    c.check(c["rampup_step"] > 0, f"rampup_step must be > 0, got {c['rampup_step']}")
    c.check(c["regular_type"] in (0, 1, 2), "regular_type must be 0 (none), 1 (L1) or 2 (L2)")
    return {"ParamOut": p, "VelocityOut": c.x("Velocity"), "VOut": c.x("V")}


register("dgc_momentum", "Param Grad Velocity V LearningRate CurrentStep",
         "ParamOut VelocityOut VOut",
         {"mu": "float", "use_nesterov": ("bool", False), "sparsity": ("floats", [0.999]),
          "rampup_begin_step": ("float", 0.0), "rampup_step": ("float", 1.0),
          "regular_coeff": ("float", 0.0), "regular_type": ("int", 0),
          "clip_norm": ("float", -1.0)},
         infer=_dgc_momentum, traits=(OPTIMIZER, STATEFUL, NO_GRAD, WHOLE_TENSOR),
         inplace={"ParamOut": "Param", "VelocityOut": "Velocity", "VOut": "V"},
         doc="step < rampup_begin_step: momentum; after: u = mu*u + g, v += u, the top-k "
             "|v| entries are applied (p -= lr*v there) and cleared in u and v")
