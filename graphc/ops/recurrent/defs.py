"""recurrent: Fluid's StaticRNN as one op whose ``body`` region is the step block (a graph in
graphc's text IR), run once per slice along axis 0 of its time-major step inputs."""

from __future__ import annotations

from ...ir.grad_defs import GRAD_SUFFIX, default_grad_maker
from ...ir.opdef import InferContext, get_op_def, register
from ...ir.types import FLOAT_DTYPES, TensorType, types_compatible
from ..scan.defs import body_graph


def step_count(inputs) -> int:
    """The number of steps the step inputs agree on (-1 while every one is unknown)."""
    known = [t.shape[0] for t in inputs if t.shape and t.shape[0] >= 0]
    return known[0] if known else -1


def _recurrent(c: InferContext):
    body = body_graph(c["body"])
    xs, init, params = c.xs("inputs"), c.xs("initial_states"), c.xs("parameters")
    n_mem = len(init)
    c.check(len(body.inputs) == n_mem + len(xs) + len(params),
            f"the step takes {len(body.inputs)} inputs but the op gives {n_mem} "
            f"initial_states + {len(xs)} inputs + {len(params)} parameters")
    c.check(len(body.outputs) > n_mem,
            f"the step returns {len(body.outputs)} values: its {n_mem} updated memories and "
            "at least one step output")
    c.check(xs, "at least one step input is needed")
    steps = step_count(xs)
    for i, (t, v) in enumerate(zip(xs, body.inputs[n_mem:])):
        c.check(len(t.shape) >= 2, f"step input {i} is {t}: it needs a time axis and a "
                                   "batch axis ([T, N, ...])")
        c.check(t.shape[0] in (steps, -1), f"step input {i} is {t} but another has {steps} "
                                           "steps")
        c.check(t.dtype == v.type.dtype and types_compatible(
            TensorType(t.shape[1:], t.dtype), v.type),
            f"step input {i} is {t}; its step slice does not match the step's {v.type}")
    for i, (t, v) in enumerate(zip(init, body.inputs)):
        c.check(types_compatible(t, v.type),
                f"initial state {i} is {t} but the step reads {v.type}")
        out = body.outputs[i].type
        c.check(types_compatible(out, v.type),
                f"memory {i} enters the step as {v.type} but is updated to {out}")
    for i, (t, v) in enumerate(zip(params, body.inputs[n_mem + len(xs):])):
        c.check(types_compatible(t, v.type), f"parameter {i} is {t} but the step reads {v.type}")
    return {"outputs": [TensorType((steps, *v.type.shape), v.type.dtype)
                        for v in body.outputs[n_mem:]]}


# Slot names are Paddle's (the ``recurrent`` op of StaticRNN); its ``step_scopes`` output is
# not needed: the gradient differentiates the step (lowering.py).
register("recurrent", "inputs* initial_states*? parameters*?", "outputs*", {"body": "str"},
         infer=_recurrent, regions=("body",),
         # the step may read LoD values from outside (an attention decoder's encoder
         # sequences, PaddleCV video's ETS); sliced inputs and memories stay dense
         lod_inputs=("parameters",), lod="aware",
         grad_reads=("inputs", "initial_states", "parameters", "outputs"),
         doc="run the body once per step t: its inputs are the memories (initial_states at "
             "t = 0, then the body's first outputs), slice t of each of `inputs` and the "
             "parameters; its other outputs, stacked over the steps, are `outputs`")


def _recurrent_grad(c: InferContext):
    # A slot mixing float and integer operands (a step reading ids beside parameters) gets a
    # gradient for each of them (zeros for the integers, which backward leaves unused); the
    # derived T_grad would drop the whole slot, and with it the parameters' gradients.
    out = {}
    for slot in ("inputs", "initial_states", "parameters"):
        if c.has(slot) and any(t.dtype in FLOAT_DTYPES for t in c.xs(slot)):
            out[slot + GRAD_SUFFIX] = list(c.xs(slot))
    return out


register("recurrent_grad", "inputs*? initial_states*? parameters*? outputs*? outputs@GRAD*?",
         "inputs@GRAD*? initial_states@GRAD*? parameters@GRAD*?", {"body": "str"},
         infer=_recurrent_grad, regions=("body",), doc="gradient of recurrent")
# with recurrent_grad defined here none is derived, so recurrent's backward is set here too
get_op_def("recurrent").grad_maker = default_grad_maker("recurrent")
