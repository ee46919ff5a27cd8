"""ps-trainer-startup: a trainer's startup graph pulls its parameters' initial values from the
servers that own their blocks (Paddle: ``recv``, ``fetch_barrier``, ``concat``).

Matches: each ``params`` entry ``[name, [[block, endpoint, rows], ...]]`` whose variable the
startup graph initialises. Produces, after the initialisers: one ``recv`` (``initial=True``)
per parameter, one ``fetch_barrier`` over every block, and a ``concat`` per parameter whose
result is the parameter's final value (the local initial value is computed, then replaced, so
random initialisers keep their positions). Declines: a parameter the startup graph does not
initialise.
"""

from __future__ import annotations

from ...ir.graph import Graph
from ..infra.base import Pass, PassContext, register_pass


@register_pass
class PsTrainerStartup(Pass):
    """Pull the parameters' initial values from their servers in a trainer's startup graph."""

    name = "ps-trainer-startup"
    regions = "decline"
    regions_reason = ("the parameter-server split acts on the outer graph's optimizer ops and "
                      "parameters; a region op is one op there and its body stays whole")
    params: list[list] = []
    trainer_id: int = 0

    def run(self, graph: Graph, ctx: PassContext) -> None:
        rw = ctx.rewriter
        received, finals = [], []
        for name, blocks in self.params:
            if name not in graph.vars:
                ctx.decline(f"{name}: not initialised by the startup program")
                continue
            final = graph.latest(name)
            shapes, ranks = [], []
            for _, _, rows in blocks:
                shape = (rows, *final.shape[1:]) if final.shape else ()
                shapes.extend(shape)
                ranks.append(len(shape))
            recv = rw.create_op("recv", {}, {"Out": [f"{b}@INIT" for b, _, _ in blocks]},
                                {"epmap": [e for _, e, _ in blocks],
                                 "varnames": [b for b, _, _ in blocks], "shapes": shapes,
                                 "ranks": ranks, "dtype": final.dtype, "initial": True,
                                 "trainer_id": self.trainer_id})
            received.append(recv.outputs["Out"])
            finals.append(final)
            ctx.count("recv")
        if not received:
            return
        flat = [v for vals in received for v in vals]
        endpoints = sorted({e for _, blocks in self.params for _, e, _ in blocks})
        fetched = rw.create_op("fetch_barrier", {"X": flat},
                               {"Out": [rw.new_version(v) for v in flat]},
                               {"endpoints": endpoints, "trainer_id": self.trainer_id}
                               ).outputs["Out"]
        replaced, i = {}, 0
        for final, vals in zip(finals, received):
            new = rw.new_version(final)
            rw.create_op("concat", {"X": fetched[i:i + len(vals)]}, {"Out": new}, {"axis": 0})
            i += len(vals)
            replaced[final] = new
        rw.set_outputs([replaced.get(v, v) for v in graph.outputs])
