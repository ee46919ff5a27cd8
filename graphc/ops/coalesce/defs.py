"""Multi-parameter optimizer ops (fused_sgd, fused_momentum, fused_adam, fused_adamw): one op
updates a group of parameters that share a learning rate, dtypes and hyper-parameters.

Each is its single-parameter op with every slot but ``LearningRate`` duplicable: position i
of ``Param``, ``Grad``, the state slots and every output slot is the i-th parameter of the
group, updated exactly as that parameter's own op would (own Beta1Pow/Beta2Pow included).
``layout`` says how the backend lays the group out: ``multi_tensor`` updates the list of
tensors as they are; ``coalesced`` concatenates each slot into one flat buffer, updates it
once and splits it back (``fuse-all-optimizer-ops`` measured both; see that pass).
"""

from __future__ import annotations

from ...ir.errors import ShapeError
from ...ir.opdef import NO_GRAD, OPTIMIZER, REQUIRED, STATEFUL, InferContext, get_op_def, register

LAYOUTS = ("multi_tensor", "coalesced")
SHARED_SLOT = "LearningRate"  # the one input every member of a group reads as the same value
# single-parameter op type -> its multi-parameter form
FUSED_OPTIMIZERS = {t: f"fused_{t}" for t in ("sgd", "momentum", "adam", "adamw")}
_BASE = {fused: base for base, fused in FUSED_OPTIMIZERS.items()}


def base_type(fused_type: str) -> str:
    """``fused_adam`` -> ``adam``."""
    return _BASE[fused_type]


def base_attrs(attrs: dict) -> dict:
    """The attributes of the single-parameter op (all but ``layout``)."""
    return {k: v for k, v in attrs.items() if k != "layout"}


def _infer_fused(c: InferContext):
    base = get_op_def(base_type(c.op_type))
    c.check(c["layout"] in LAYOUTS, f"layout must be one of {list(LAYOUTS)}, got {c['layout']!r}")
    count = len(c.xs("Param"))
    for slot in base.input_names:
        if slot != SHARED_SLOT:
            n = len(c.xs(slot))
            c.check(n == count, f"{slot} has {n} values but Param has {count}")
    lr = c.xs(SHARED_SLOT)
    attrs = base_attrs(c.attrs)
    outs: dict[str, list] = {slot: [] for slot in base.output_names}
    for i in range(count):
        member = {slot: (lr if slot == SHARED_SLOT else [c.ins[slot][i]])
                  for slot in base.input_names}
        try:
            result = base.infer(InferContext(base.type, member, attrs))
        except ShapeError as exc:
            raise ShapeError(f"parameter {i}: {exc}") from None
        for slot in base.output_names:
            outs[slot].append(result[slot])
    return outs


def _register_fused(base_op: str, fused_op: str) -> None:
    base = get_op_def(base_op)
    ins = " ".join(s if s == SHARED_SLOT else f"{s}*" for s in base.input_names)
    outs = " ".join(f"{s}*" for s in base.output_names)
    attrs = {name: a.type if a.default is REQUIRED else (a.type, a.default)
             for name, a in base.attrs.items()}
    attrs["layout"] = ("str", LAYOUTS[0])
    register(fused_op, ins, outs, attrs, infer=_infer_fused,
             traits=(OPTIMIZER, STATEFUL, NO_GRAD), inplace=dict(base.inplace),
             doc=f"{base_op} over a group of parameters sharing LearningRate "
                 "(position i of every duplicable slot is parameter i)")


for _base, _fused in FUSED_OPTIMIZERS.items():
    _register_fused(_base, _fused)
