"""Fused elementwise-add + activation ops (Paddle's fused_elemwise_activation), made by the
fuse-elewise-add-act pass, and their gradient op.

``functor_list`` names the composition, outermost functor first, as in Paddle:

* ``[act, "elementwise_add"]``: Out = act(X + Y), IntermediateOut = X + Y.
* ``["elementwise_add", act]``: Out = X + act(Y), IntermediateOut = act(Y) (Paddle's form).
  graphc never swaps operands, so this form takes ``unary_operand``: ``"Y"`` (the default,
  as Paddle) or ``"X"``, which means Out = act(X) + Y and IntermediateOut = act(X). Operand
  order matters under Paddle's ``axis`` broadcasting, where either operand may be the smaller.

The add's ``axis`` and the activation's own attributes (scale's scale/bias/bias_after_scale,
leaky_relu's alpha, gelu's approximate) are attributes of the fused op with the unfused ops'
defaults. IntermediateOut is present when something reads it, and ``save_intermediate_out``
says so, as in Paddle (on the grad op: whether it reads IntermediateOut).

The grad op follows graphc's ``T_grad`` layout and has the forward op's attributes: inputs
X, Y, Out, IntermediateOut, Out@GRAD and IntermediateOut@GRAD (the intermediate's gradient
from other readers), all optional; outputs X@GRAD and Y@GRAD. The pass gives it exactly the
values the two unfused grad ops read; the grad maker (for programs that build the fused op
directly) gives it everything, and the rule recomputes what is missing.
"""

from __future__ import annotations

from ...ir.grad_defs import GRAD_SUFFIX
from ...ir.opdef import ELEMENTWISE, InferContext, get_op_def, register
from ...ir.shapes import broadcast_shapes
from ...ir.types import FLOAT_DTYPES, TensorType

FUSED_OP = "fused_elemwise_activation"
FUSED_GRAD_OP = "fused_elemwise_activation_grad"
BINARY = "elementwise_add"
# activation -> its attributes carried by the fused op
ACTIVATION_ATTRS: dict[str, tuple[str, ...]] = {
    "relu": (), "tanh": (), "sigmoid": (), "gelu": ("approximate",),
    "leaky_relu": ("alpha",), "scale": ("scale", "bias", "bias_after_scale"),
}


def _attr_schema() -> dict:
    schema = {"functor_list": "strs", "axis": ("int", -1), "unary_operand": ("str", "Y"),
              "save_intermediate_out": ("bool", True)}
    for act, names in ACTIVATION_ATTRS.items():
        adefs = get_op_def(act).attrs
        for name in names:
            schema[name] = (adefs[name].type, adefs[name].default)
    return schema


def functors_of(attrs) -> tuple[str, bool, str]:
    """(activation, whether the add is applied first, operand the activation reads) of a
    fused op's (checked) attributes."""
    functors = attrs["functor_list"]
    add_first = functors[1] == BINARY
    return (functors[0] if add_first else functors[1]), add_first, attrs["unary_operand"]


def activation_attrs(attrs, act: str) -> dict:
    """The attributes of the unfused activation ``act`` from a fused op's attributes."""
    return {name: attrs[name] for name in ACTIVATION_ATTRS[act]}


def parse_functors(c: InferContext) -> tuple[str, bool, str]:
    """``functors_of`` for shape inference, which also checks the attributes."""
    functors = list(c["functor_list"])
    c.check(len(functors) == 2 and BINARY in functors,
            f"functor_list must pair elementwise_add with an activation, got {functors}")
    add_first = functors[1] == BINARY
    act = functors[0] if add_first else functors[1]
    c.check(act in ACTIVATION_ATTRS, f"functor_list activation must be one of "
                                     f"{sorted(ACTIVATION_ATTRS)}, got {act!r}")
    operand = c["unary_operand"]
    c.check(operand in ("X", "Y"), f"unary_operand must be 'X' or 'Y', got {operand!r}")
    c.check(not add_first or operand == "Y",
            f"unary_operand={operand!r} only applies to functor_list ['elementwise_add', act]")
    return act, add_first, operand


def _infer(c: InferContext):
    x, y = c.x("X"), c.x("Y")
    c.check(x.dtype == y.dtype, f"X is {x.dtype} but Y is {y.dtype}")
    _, add_first, operand = parse_functors(c)
    out = TensorType(broadcast_shapes(x.shape, y.shape, c["axis"]), x.dtype)
    inter = out if add_first else c.x(operand)
    return {"Out": out, "IntermediateOut": inter}


def _infer_grad(c: InferContext):
    _, add_first, operand = parse_functors(c)
    out = {}
    for slot in ("X", "Y"):
        if c.has(slot):
            t = c.x(slot)
        elif not add_first and slot == operand and c.has("IntermediateOut"):
            t = c.x("IntermediateOut")  # act(slot) has slot's type
        else:
            continue
        if t.dtype in FLOAT_DTYPES:
            out[slot + GRAD_SUFFIX] = t
    return out


def _grad_maker(inputs, outputs, attrs, out_grads, in_grads):
    ins = {s: list(v) for s, v in {**inputs, **outputs}.items()}
    for slot, names in out_grads.items():
        if any(n is not None for n in names):
            ins[slot + GRAD_SUFFIX] = list(names)
    outs = {slot + GRAD_SUFFIX: names for slot, names in in_grads.items()
            if any(n is not None for n in names)}
    return [(FUSED_GRAD_OP, ins, outs, dict(attrs))]


_FUSED = register(
    FUSED_OP, "X Y", "Out IntermediateOut?", _attr_schema(), infer=_infer, traits=(ELEMENTWISE,),
    lod_inputs=("X", "Y"),  # fc's bias add + activation on the tokens
    doc="Out = act(X + Y) or X + act(Y) / act(X) + Y, by functor_list and unary_operand")
_FUSED.grad_maker = _grad_maker
register(FUSED_GRAD_OP, "X? Y? Out? IntermediateOut? Out@GRAD? IntermediateOut@GRAD?",
         "X@GRAD? Y@GRAD?", _attr_schema(), infer=_infer_grad,
         lod_inputs=("X", "Y", "Out", "IntermediateOut", "Out@GRAD", "IntermediateOut@GRAD"),
         lod_outputs={"X@GRAD": ("X",), "Y@GRAD": ("Y",)},
         doc=f"gradient of {FUSED_OP}: X@GRAD and Y@GRAD from Out@GRAD")
