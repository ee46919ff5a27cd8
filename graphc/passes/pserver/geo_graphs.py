"""ps-geo-trainer-graph and ps-geo-server-graph: GEO-SGD's split of a training graph. Trainers
keep the whole step (optimizer included) and every ``push_nums`` steps exchange parameter
deltas with the servers; a server only adds the deltas it receives to its blocks.

ps-geo-trainer-graph matches every optimizer op's parameter; produces one
``geo_sgd_exchange`` after the last update, reading each parameter as the step read it (Old)
and as the optimizer left it (X); its outputs become the parameters' final values.
ps-geo-server-graph keeps, per block on ``endpoint``, a feed ``w.block0@DELTA`` and
``elementwise_add`` of it to the block; every other op leaves the graph. Both read the plan of
ps-slice-variables. Declines: graphs without optimizer ops; a server owning no block.
"""

from __future__ import annotations

from ...ir.graph import Graph
from ...ir.types import TensorType
from ..infra.base import Pass, PassContext, register_pass
from .plan import blocks_of, updated_pairs
from .server_graph import SOURCE_KEY, new_input


@register_pass
class PsGeoTrainerGraph(Pass):
    """Keep the optimizer; exchange parameter deltas with the servers every push_nums steps."""

    name = "ps-geo-trainer-graph"
    regions = "decline"
    regions_reason = ("the parameter-server split acts on the outer graph's optimizer ops and "
                      "parameters; a region op is one op there and its body stays whole")
    trainer_id: int = 0
    trainers: int = 1
    push_nums: int = 100

    def run(self, graph: Graph, ctx: PassContext) -> None:
        pairs = updated_pairs(graph)
        if not pairs:
            ctx.decline("no optimizer ops: nothing to exchange")
            return
        rw = ctx.rewriter
        olds, news, names = [], [], []
        spec = {"blocks": [], "starts": [], "ends": [], "counts": [], "epmap": []}
        for _, param, _ in pairs:
            blocks = blocks_of(graph, param.var.name)
            olds.append(param)
            news.append(graph.latest(param.var.name))
            names.append(param.var.name)
            spec["counts"].append(len(blocks))
            for b in blocks:
                spec["blocks"].append(b.param)
                spec["starts"].append(b.start)
                spec["ends"].append(b.end)
                spec["epmap"].append(b.endpoint)
        outs = [rw.new_version(p) for p in olds]
        rw.create_op("geo_sgd_exchange", {"Old": olds, "X": news}, {"Out": outs},
                     {**spec, "params": names, "push_nums": self.push_nums,
                      "trainers": self.trainers, "trainer_id": self.trainer_id},
                     role="optimize")
        final = dict(zip(news, outs))
        rw.set_outputs([final.get(v, v) for v in graph.outputs])
        ctx.count("parameters exchanged", len(outs))


@register_pass
class PsGeoServerGraph(Pass):
    """Keep only ``block += delta`` for one server's blocks (GEO-SGD's server)."""

    name = "ps-geo-server-graph"
    regions = "decline"
    regions_reason = ("the parameter-server split acts on the outer graph's optimizer ops and "
                      "parameters; a region op is one op there and its body stays whole")
    endpoint: str = "127.0.0.1:6174"

    def run(self, graph: Graph, ctx: PassContext) -> None:
        rw = ctx.rewriter
        work = []
        for _, param, _ in updated_pairs(graph):
            work += [(param, b) for b in blocks_of(graph, param.var.name)
                     if b.endpoint == self.endpoint]
        rw.set_outputs([])
        for op in reversed(graph.ops()):
            rw.erase_op(op)
        outputs = []
        for param, b in work:
            rows = TensorType((b.end - b.start, *param.shape[1:]), param.dtype)
            if b.param == param.var.name:
                block = param
                param.var.extra[SOURCE_KEY] = [param.var.name, 0, -1]
            else:
                block = new_input(ctx, b.param, rows, "param", [param.var.name, b.start, b.end])
            delta = new_input(ctx, f"{b.param}@DELTA", rows, "feed", None)
            out = rw.new_version(block)
            rw.create_op("elementwise_add", {"X": block, "Y": delta}, {"Out": out},
                         {"axis": -1}, role="optimize")
            outputs.append(out)
            ctx.count("blocks")
        rw.set_outputs(outputs)
        for v in list(graph.inputs):
            if not graph.has_users(v) and not graph.is_output(v):
                rw.erase_value(v)
        if not work:
            ctx.decline("this server owns no block")
