"""The ``while`` op: a loop whose body is a region, carrying values from one iteration to the
next while a carried bool is true (Paddle's ``while`` op, without sub-blocks or step scopes)."""

from __future__ import annotations

from ...ir.opdef import InferContext, register
from ...ir.types import FLOAT_DTYPES, types_compatible
from ..scan.defs import body_graph
from . import arrays  # noqa: F401  (the tensor-array ops register with this family)

# Gradients through a loop differentiate a scan of at most this many iterations when the
# program does not bound the loop (max_iterations 0): docs/control_flow.md
DEFAULT_MAX_ITERATIONS = 128


def _while(c: InferContext):
    body = body_graph(c["body"])
    carry, aux, xs, xaux = c.xs("Carry"), c.xs("Aux"), c.xs("X"), c.xs("XAux")
    n_state = len(carry) + len(aux)
    c.check(len(body.inputs) == n_state + len(xs) + len(xaux),
            f"the body takes {len(body.inputs)} inputs but the op gives {len(carry)} Carry + "
            f"{len(aux)} Aux + {len(xs)} X + {len(xaux)} XAux")
    c.check(len(body.outputs) == n_state,
            f"the body returns {len(body.outputs)} values for {n_state} carried ones")
    for t in [*carry, *xs]:
        c.check(t.dtype in FLOAT_DTYPES, "Carry and X hold floating-point tensors and arrays "
                                         f"(the differentiable ones), got {t}")
    for t in [*aux, *xaux]:
        c.check(t.dtype not in FLOAT_DTYPES, f"Aux and XAux hold integer and bool values, got {t}")
    for i, (t, v) in enumerate(zip([*carry, *aux, *xs, *xaux], body.inputs)):
        c.check(types_compatible(t, v.type), f"operand {i} is {t} but the body reads {v.type}")
    for i, (t, v) in enumerate(zip([*carry, *aux], body.outputs)):
        c.check(types_compatible(t, v.type) and t.dtype == v.type.dtype,
                f"carried value {i} ({body.inputs[i].name}) enters the body as {t} but the "
                f"body leaves it as {v.type}: a loop must keep each carried value's type")
    k = c["cond_index"]
    c.check(0 <= k < len(aux), f"cond_index {k} is not one of the {len(aux)} Aux values")
    cond = aux[k] if 0 <= k < len(aux) else None
    c.check(cond is not None and cond.dtype == "bool" and cond.numel() == 1 and not cond.array,
            f"the condition must be a bool tensor of one element, got {cond}")
    c.check(c["max_iterations"] >= 0, "max_iterations must be >= 0 (0: not bounded)")
    return {"Out": [v.type if -1 in t.shape else t for t, v in zip(carry, body.outputs)],
            "AuxOut": [v.type if -1 in t.shape else t
                       for t, v in zip(aux, body.outputs[len(carry):])]}


register("while", "Carry*? Aux*? X*? XAux*?", "Out*? AuxOut*?",
         {"body": "str", "cond_index": "int", "max_iterations": ("int", 0)},
         infer=_while, regions=("body",),
         # the body may read LoD values from outside (an attention decoder's encoder
         # sequences); carried values keep one shape, so they are never LoD values
         lod_inputs=("X", "XAux"), lod="aware",
         doc="repeat the body while Aux[cond_index] is true (tested before each iteration): "
             "its inputs are the carried values (Carry: floating-point tensors and arrays, "
             "then Aux: integer and bool ones), then the read-only X and XAux; its outputs "
             "the carried values' next versions, which Out and AuxOut hold after the last "
             "iteration. Gradients flow through Carry and X (a scan of at most max_iterations, or "
             f"{DEFAULT_MAX_ITERATIONS} when 0; longer runs are refused at run time)")
