"""microbatch_loop: one step's forward and backward ops (a body graph) run over microbatches of
the fed batch, summing the parameter gradients; PipelineOptimizer builds it (docs/porting)."""

from __future__ import annotations

from ...ir.errors import ShapeError
from ...ir.opdef import NO_GRAD, register
from ...ir.types import types_compatible
from ..scan.defs import body_graph

# how an exported forward value leaves the loop: its microbatches' rows put back in order
# (a value with the batch as its first dimension), or the mean over microbatches (the loss)
MERGES = ("rows", "mean")


def _microbatch_loop(c):
    m, n_grads = c["num_microbatches"], c["num_grads"]
    c.check(m >= 1, f"num_microbatches must be >= 1, got {m}")
    try:
        body = body_graph(c["body"])
    except ShapeError as exc:
        raise ShapeError(f"microbatch_loop: {exc}") from None
    batch, state, consts = c.xs("Batch"), c.xs("State"), c.xs("Consts")
    merges = list(c["merges"])
    ins, outs = body.inputs, body.outputs
    c.check(len(ins) == n_grads + len(state) + len(batch) + len(consts),
            f"the body takes {len(ins)} inputs but the op gives {n_grads} gradient sums + "
            f"{len(state)} State + {len(batch)} Batch + {len(consts)} Consts")
    c.check(len(outs) == n_grads + len(state) + len(merges),
            f"the body returns {len(outs)} values, not {n_grads} gradient sums + "
            f"{len(state)} State + {len(merges)} exported values")
    for i in range(n_grads):
        t = ins[i].type
        c.check(all(d >= 0 for d in t.shape) and not t.sparse and not t.lod_level,
                f"gradient sum {i} must be a dense value of known shape, got {t}")
        c.check(types_compatible(outs[i].type, t),
                f"gradient sum {i} enters the body as {t} but leaves it as {outs[i].type}")
    for i, t in enumerate(state):
        v, out = ins[n_grads + i], outs[n_grads + i]
        c.check(types_compatible(t, v.type) and types_compatible(out.type, v.type),
                f"State {i} is {t}; the body reads {v.type} and writes {out.type}")
    first = n_grads + len(state)
    for i, t in enumerate(batch):
        v = ins[first + i]
        c.check(len(t.shape) >= 1 and t.shape[0] == -1 and not t.lod_level and not t.sparse,
                f"Batch {i} is {t}; it must be a dense value whose first dimension is the "
                "batch (-1)")
        c.check(types_compatible(t, v.type), f"Batch {i} is {t} but the body reads {v.type}")
    first += len(batch)
    for i, t in enumerate(consts):
        v = ins[first + i]
        c.check(types_compatible(t, v.type), f"Consts {i} is {t} but the body reads {v.type}")
    exported = outs[n_grads + len(state):]
    for merge, v in zip(merges, exported):
        c.check(merge in MERGES, f"merge must be one of {MERGES}, got {merge!r}")
        c.check(merge != "rows" or (v.type.shape[:1] == (-1,) and not v.type.lod_level),
                f"'rows' merges a value whose first dimension is the batch, not {v.type}")
    return {"GradSum": [v.type for v in ins[:n_grads]],
            "StateOut": [v.type for v in ins[n_grads:n_grads + len(state)]],
            "Out": [v.type for v in exported]}


register("microbatch_loop", "Batch*? State*? Consts*?", "GradSum*? StateOut*? Out*?",
         {"body": "str", "num_microbatches": "int", "num_grads": "int",
          "merges": ("strs", []), "sections": ("strs", [])},
         infer=_microbatch_loop, traits=(NO_GRAD,), regions=("body",),
         doc="split each Batch value into num_microbatches microbatches along its first "
             "dimension and run the body once per microbatch in order; the body's inputs are "
             "the gradient sums so far (zeros before the first), the State carried from one "
             "microbatch to the next, the microbatch of each Batch value and the Consts; it "
             "returns the new gradient sums, the State and the exported values, merged over "
             "microbatches as `merges` says ('rows': concatenated in order, 'mean': averaged). "
             "`sections` records the device_guard sections of the body's ops")
