"""dynamic_rnn: Fluid's DynamicRNN as one op whose ``body`` attribute is the step block as a
graph in graphc's text IR, run over the time steps of its LoD step inputs (docs/lod.md)."""

from __future__ import annotations

from ...ir.opdef import InferContext, register
from ...ir.types import TensorType, types_compatible
from ..scan.defs import body_graph


def _dynamic_rnn(c: InferContext):
    body = body_graph(c["body"])
    init, xs, consts = c.xs("Init"), c.xs("Xs"), c.xs("Consts")
    sources, values = c["init_from"], c["init_values"]
    c.check(len(sources) == len(values), "init_from and init_values must have one entry per "
                                         "memory")
    n_mem = len(sources)
    c.check(len(body.inputs) == n_mem + len(xs) + len(consts),
            f"the body takes {len(body.inputs)} inputs but the op gives {n_mem} memories + "
            f"{len(xs)} Xs + {len(consts)} Consts")
    c.check(len(body.outputs) > n_mem, f"the body returns {len(body.outputs)} values: its "
                                       f"{n_mem} updated memories and at least one output")
    c.check(xs, "at least one step input (Xs) is needed")
    for t in xs:
        c.check(t.lod_level == 1, f"step inputs must be LoD values of level 1, got {t}")
    ins = body.inputs
    for i, src in enumerate(sources):
        carry, out = ins[i].type, body.outputs[i].type
        c.check(types_compatible(out, carry),
                f"memory {i} enters the step as {carry} but is updated to {out}")
        if src >= 0:
            c.check(src < len(init) and types_compatible(init[src], carry),
                    f"memory {i} is initialised from Init {src} "
                    f"({init[src] if src < len(init) else 'missing'}) but the step reads "
                    f"{carry}")
    for t, v in zip(xs, ins[n_mem:]):
        c.check(t.dtype == v.type.dtype and tuple(t.shape[1:]) == tuple(v.type.shape[1:]),
                f"step input {t} does not match the step's {v.type} (one token per sequence)")
    for t, v in zip(consts, ins[n_mem + len(xs):]):
        c.check(types_compatible(t, v.type), f"a constant is {t} but the step reads {v.type}")
    tokens = xs[0].shape[0]
    return {"Out": [TensorType((tokens, *v.type.shape[1:]), v.type.dtype, False, 1)
                    for v in body.outputs[n_mem:]]}


register("dynamic_rnn", "Init*? Xs* Consts*?", "Out*",
         {"body": "str", "init_from": ("ints", []), "init_values": ("floats", [])},
         infer=_dynamic_rnn, lod_inputs=("Xs", "Consts"), lod="aware", regions=("body",),
         doc="run the body once per time step of the LoD step inputs Xs (token t of every "
             "sequence as a [N, ...] row batch; finished sequences keep their memories). Body "
             "inputs: the memories (from Init[init_from[i]], or filled with init_values[i] "
             "where init_from[i] < 0), the step slices of Xs, the Consts; body outputs: the "
             "updated memories, then the step outputs, gathered into Out with Xs[0]'s LoD")
