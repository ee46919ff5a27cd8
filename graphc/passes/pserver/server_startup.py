"""ps-server-startup: a server's startup graph: the original initialisers, unchanged, then each
block the server owns cut from its whole variable, so a block equals the rows of a local run's
initial value bit for bit (Paddle re-draws a block with the block's shape instead).

Matches: the startup graph's final value of each ``blocks`` entry's source variable.
Produces: per entry ``[name, source, start, end]`` a ``split`` along rows whose middle piece
becomes the persistable ``name`` (end -1: the whole variable, kept, or copied to ``name``); the
graph's outputs become exactly the entries. Initialisers of variables the server does not own stay
(so random initialisers keep their positions and seeds) but are no longer outputs.
Declines: an entry whose source the startup graph does not initialise (it is reported, and
the server then needs it from a checkpoint).
"""

from __future__ import annotations

from ...ir.graph import Graph
from ..infra.base import Pass, PassContext, register_pass


@register_pass
class PsServerStartup(Pass):
    """Cut a server's blocks from the original startup graph's initial values."""

    name = "ps-server-startup"
    regions = "decline"
    regions_reason = ("the parameter-server split acts on the outer graph's optimizer ops and "
                      "parameters; a region op is one op there and its body stays whole")
    blocks: list[list] = []

    def run(self, graph: Graph, ctx: PassContext) -> None:
        rw = ctx.rewriter
        outputs = []
        for name, source, start, end in self.blocks:
            if source not in graph.vars:
                ctx.decline(f"{source}: not initialised by the startup program")
                continue
            whole = graph.latest(source)
            if end < 0 and name == source:
                outputs.append(whole)
                continue
            if end < 0:  # a copy under the block's name (a cut parameter's scalar state)
                copy = rw.create_op("assign", {"X": whole}, {"Out": name},
                                    after=graph.producer(whole)).output("Out")
                copy.var.kind = whole.var.kind
                outputs.append(copy)
                ctx.count("copies")
                continue
            rows = whole.shape[0]
            sections = [s for s in (start, end - start, rows - end) if s]
            split = rw.create_op("split", {"X": whole},
                                 {"Out": [f"{source}@ROWS{i}" for i in range(len(sections))]},
                                 {"sections": sections, "axis": 0},
                                 after=graph.producer(whole))
            piece = split.outputs["Out"][1 if start else 0]
            piece = rw.create_op("assign", {"X": piece}, {"Out": name}, after=split
                                 ).output("Out")
            piece.var.kind = whole.var.kind
            outputs.append(piece)
            ctx.count("blocks cut")
        rw.set_outputs(outputs)
