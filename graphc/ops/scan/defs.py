"""scan_layers: k iterations of a one-layer body graph (text IR in its ``body`` attribute) over
stacked per-layer inputs, carrying values from one iteration to the next; and ``reverse``."""

from __future__ import annotations

import functools

from ...ir.errors import GraphcError, ShapeError
from ...ir.opdef import NO_GRAD, register
from ...ir.types import TensorType, types_compatible


@functools.lru_cache(maxsize=512)
def body_graph(text: str):
    """The body of a scan_layers op, parsed and verified once per distinct text."""
    from ...ir.text import parse
    from ...ir.verify import verify
    try:
        g = parse(text)
        verify(g)
    except GraphcError as exc:
        raise ShapeError(f"its body does not verify: {exc}") from None
    return g


def _scan_layers(c):
    k = c["iterations"]
    c.check(k >= 1, f"iterations must be >= 1, got {k}")
    body = body_graph(c["body"])
    init, xs, consts = c.xs("Init"), c.xs("Xs"), c.xs("Consts")
    c.check(len(body.inputs) == len(init) + len(xs) + len(consts),
            f"the body takes {len(body.inputs)} inputs but the op gives "
            f"{len(init)} Init + {len(xs)} Xs + {len(consts)} Consts")
    c.check(len(body.outputs) >= len(init),
            f"the body returns {len(body.outputs)} values, fewer than its {len(init)} carries")
    ins = body.inputs
    for t in (*init, *xs, *consts):
        c.check(not t.sparse, "row-sparse values cannot be scanned")
    for i, (t, v) in enumerate(zip(init, ins)):
        c.check(types_compatible(t, v.type), f"Init {i} is {t} but the body reads {v.type}")
        out = body.outputs[i].type
        c.check(types_compatible(out, v.type),
                f"carry {i} enters the body as {v.type} but leaves it as {out}")
    for i, (t, v) in enumerate(zip(xs, ins[len(init):])):
        c.check(t.dtype == v.type.dtype and types_compatible(
            TensorType(t.shape[1:], t.dtype), v.type) and len(t.shape) >= 1
            and t.shape[0] in (k, -1),
            f"Xs {i} is {t}; expected [{k}] + the body's {v.type}")
    for i, (t, v) in enumerate(zip(consts, ins[len(init) + len(xs):])):
        c.check(types_compatible(t, v.type), f"Consts {i} is {t} but the body reads {v.type}")
    return {"Out": [v.type for v in ins[:len(init)]],
            "Ys": [TensorType((k, *v.type.shape), v.type.dtype)
                   for v in body.outputs[len(init):]]}


register("scan_layers", "Init*? Xs*? Consts*?", "Out*? Ys*?", {"body": "str", "iterations": "int"},
         infer=_scan_layers, traits=(NO_GRAD,), regions=("body",),
         doc="run the body graph `iterations` times: its inputs are the carries (Init, then "
             "each iteration's carry outputs), slice i of each Xs, and the Consts; Out = the "
             "final carries, Ys = the body's other outputs stacked over iterations")


def _reverse(c):
    x = c.x("X")
    for a in c["axis"]:
        c.check(-len(x.shape) <= a < len(x.shape), f"axis {a} out of range for {x}")
    return {"Out": x}


register("reverse", "X", "Out", {"axis": "ints"}, infer=_reverse,
         doc="Out = X with the order of its elements along each listed axis reversed")
