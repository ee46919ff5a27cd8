"""ps-trainer-graph: the trainer's side of the parameter-server transpile. The optimizer moves to
the servers; the trainer sends its gradient blocks and receives the updated parameter blocks.

Matches: every optimizer op and the optimize / lr_sched ops it reads (regularisation,
clipping, per-parameter learning rates, schedules), using the plan of ps-slice-variables.
Produces, in place of them: per parameter, ``split`` of the backward gradient into its blocks
(when cut) right after the backward op that finishes it; one ``send`` of every dense block
after the backward (one host callback per step, not one per parameter: a callback costs about
0.1 ms and the channel only stages what it is given); then (sync mode) one ``send_barrier``
over every send's token, one ``recv`` of every parameter block (per dtype) waiting on the
barrier, one ``fetch_barrier`` over them, and a ``concat`` (axis 0) per parameter whose result
is the parameter's new value. A row-sparse gradient (is_sparse embedding) travels as
rows: one ``send_rows`` (split "range") pushes each block's rows to its server. A distributed
table (ps_plan.distributed_tables) leaves the trainer: each lookup becomes a
``distributed_lookup_table`` (pull the batch's rows), each lookup gradient a
``distributed_lookup_table_grad`` (rows without the table), and one ``send_rows`` (split
"mod") pushes the table's row gradient; nothing of it is received. An is_sparse table read
only by its lookups is treated alike, its rows routed by block range (Paddle's remote
prefetch; ``prefetch`` false: it is received whole, as a replica). Optimizer state and
learning-rate variables no longer read by the trainer leave the graph. Async mode (sync_mode
false) omits the send barrier: the recv waits on the sends.
Declines: a graph without optimizer ops.
"""

from __future__ import annotations

from ...ir.graph import Graph
from ..data_parallel import backward_gradient
from ..infra.base import Pass, PassContext, register_pass
from .plan import TABLE_KEY, Table, blocks_of, distributed_tables, prefetched_tables, updated_pairs


@register_pass
class PsTrainerGraph(Pass):
    """Replace the optimizer by send/recv of gradient and parameter blocks (trainer side)."""

    name = "ps-trainer-graph"
    regions = "decline"
    regions_reason = ("the parameter-server split acts on the outer graph's optimizer ops and "
                      "parameters; a region op is one op there and its body stays whole")
    trainer_id: int = 0
    sync_mode: bool = True
    prefetch: bool = True  # is_sparse tables read only by lookups: pull rows (remote prefetch)

    def run(self, graph: Graph, ctx: PassContext) -> None:
        pairs = updated_pairs(graph)
        if not pairs:
            ctx.decline("no optimizer ops: nothing to send")
            return
        rw = ctx.rewriter
        attrs = {"trainer_id": self.trainer_id}
        tables = distributed_tables(graph)
        prefetched = prefetched_tables(graph) if self.prefetch else {}
        tokens, per_param, dense = [], [], []  # dense: (gradient block, Block) to send
        for op, param, grad in pairs:
            if param.var.name in tables:
                tokens.append(self._table(graph, ctx, tables[param.var.name], attrs))
                continue
            if param.var.name in prefetched:
                tokens.append(self._table(graph, ctx, prefetched[param.var.name], attrs,
                                          blocks_of(graph, param.var.name)))
                continue
            blocks = blocks_of(graph, param.var.name)
            producer = graph.producer(grad)
            if grad.type.sparse:
                # rows travel as rows: each block's to its server, rebased to the block
                send = rw.create_op("send_rows", {"X": grad}, {"Out": f"{grad.var.name}@SEND"},
                                    {**attrs, "epmap": [b.endpoint for b in blocks],
                                     "varnames": [b.grad for b in blocks], "split": "range",
                                     "sections": [b.end - b.start for b in blocks]},
                                    role="backward", after=producer)
                tokens.append(send.output("Out"))
                per_param.append((op, param, blocks))
                ctx.count("row-sparse gradients sent as rows")
                continue
            if len(blocks) > 1:
                split = rw.create_op("split", {"X": grad}, {"Out": [b.grad for b in blocks]},
                                     {"sections": [b.end - b.start for b in blocks], "axis": 0},
                                     role="backward", after=producer)
                dense.extend(zip(split.outputs["Out"], blocks))
                ctx.count("split")
            else:
                dense.extend(zip([grad], blocks))
            per_param.append((op, param, blocks))
        if dense:  # one send of every dense block, after the backward: one host callback
            send = rw.create_op("send", {"X": [v for v, _ in dense]}, {"Out": "send@TOKEN"},
                                {**attrs, "epmap": [b.endpoint for _, b in dense],
                                 "varnames": [b.grad for _, b in dense]}, role="backward")
            tokens.append(send.output("Out"))
            ctx.count("send")
        endpoints = sorted({b.endpoint for _, _, blocks in per_param for b in blocks})
        if not per_param:  # row tables only: ship the rows, take the (empty) replies
            endpoints = sorted({e for t in tables for e in graph.vars[t].extra[TABLE_KEY]} |
                               {b.endpoint for t in prefetched for b in blocks_of(graph, t)})
            barrier = rw.create_op("send_barrier", {"X": tokens}, {"Out": "send_barrier@TOKEN"},
                                   {**attrs, "endpoints": endpoints}, role="backward"
                                   ).output("Out")
            rw.create_op("fetch_barrier", {"X": [barrier]}, {"Out": [rw.new_version(barrier)]},
                         {**attrs, "endpoints": endpoints}, role="backward")
            self._drop_optimizer(graph, ctx, {})
            return
        after = tokens  # async: each step's first recv ships what the sends staged
        if self.sync_mode:
            after = [rw.create_op("send_barrier", {"X": tokens}, {"Out": "send_barrier@TOKEN"},
                                  {**attrs, "endpoints": endpoints}, role="backward"
                                  ).output("Out")]
        received: dict[str, list] = {}  # parameter -> its received blocks
        for dtype in dict.fromkeys(param.dtype for _, param, _ in per_param):
            names, eps, varnames, shapes, ranks, owners = [], [], [], [], [], []
            for _op, param, blocks in per_param:
                if param.dtype != dtype:
                    continue
                for b in blocks:
                    shape = (b.end - b.start, *param.shape[1:]) if param.shape else ()
                    shapes.extend(shape)
                    ranks.append(len(shape))
                    names.append(f"{b.param}@RECV" if b.param == param.var.name else b.param)
                    eps.append(b.endpoint)
                    varnames.append(b.param)
                    owners.append(param.var.name)
            recv = rw.create_op("recv", {"X": after}, {"Out": names},
                                {**attrs, "epmap": eps, "varnames": varnames, "shapes": shapes,
                                 "ranks": ranks, "dtype": dtype}, role="backward")
            for owner, v in zip(owners, recv.outputs["Out"]):
                received.setdefault(owner, []).append(v)
            ctx.count("recv")
        flat = [v for _, param, _ in per_param for v in received[param.var.name]]
        fetched = rw.create_op("fetch_barrier", {"X": flat},
                               {"Out": [rw.new_version(v) for v in flat]},
                               {**attrs, "endpoints": endpoints}, role="backward"
                               ).outputs["Out"]
        new_params, i = {}, 0
        for _op, param, _blocks in per_param:
            count = len(received[param.var.name])
            mine = fetched[i:i + count]
            i += count
            new = rw.new_version(param)
            rw.create_op("concat", {"X": mine}, {"Out": new}, {"axis": 0}, role="backward")
            new_params[param.var.name] = new
        self._drop_optimizer(graph, ctx, new_params)

    @staticmethod
    def _table(graph: Graph, ctx: PassContext, table: Table, attrs: dict, blocks=None):
        """The trainer's side of a table whose rows stay on the servers: pulls, row
        gradients, one push; returns the push's token. ``blocks``: an is_sparse table's
        (remote prefetch: rows by block range); None: a distributed table (rows by id %
        #servers)."""
        rw = ctx.rewriter
        common = {"table_name": table.name, "height": table.height, "width": table.width,
                  "dtype": table.dtype, "padding_idx": table.padding_idx}
        if blocks is None:
            endpoints = list(graph.vars[table.name].extra[TABLE_KEY])
            route = {"epmap": endpoints, "split": "mod"}
            push = {"epmap": endpoints, "varnames": [table.name] * len(endpoints),
                    "split": "mod"}
        else:
            route = {"epmap": [b.endpoint for b in blocks], "split": "range",
                     "sections": [b.end - b.start for b in blocks],
                     "varnames": [b.param for b in blocks]}
            push = {**route, "varnames": [b.grad for b in blocks]}
            ctx.count("remote-prefetch tables")
        for op in table.lookups:
            out = op.outputs["Out"][0]
            pull = rw.create_op("distributed_lookup_table", {"Ids": op.inputs["Ids"]},
                                {"Out": out.var.name}, {**common, **attrs, **route},
                                derived_from=[op])
            rw.replace_op(op, {"Out": pull.output("Out")})
            ctx.count("table pulls")
        for op in table.grads:
            grad = rw.create_op("distributed_lookup_table_grad",
                                {"Ids": op.inputs["Ids"], "Out@GRAD": op.inputs["Out@GRAD"]},
                                {"W@GRAD": op.outputs["W@GRAD"][0].var.name}, common,
                                derived_from=[op])
            rw.replace_op(op, {"W@GRAD": grad.output("W@GRAD")})
        bg = backward_gradient(graph, graph.op_inputs(table.optimizer)["Grad"][0])
        send = rw.create_op("send_rows", {"X": bg}, {"Out": f"{table.name}@GRAD@SEND"},
                            {**attrs, **push}, role="backward", after=graph.producer(bg))
        ctx.count("table pushes")
        return send.output("Out")

    @staticmethod
    def _drop_optimizer(graph: Graph, ctx: PassContext, new_params: dict) -> None:
        """Erase the optimize / lr_sched ops; the concats' results become the parameters'
        final values; inputs no longer read (optimizer state, learning rates) leave."""
        rw = ctx.rewriter
        doomed = [op for op in graph.ops() if op.role in ("optimize", "lr_sched")]
        written = {v for op in doomed for v in op.output_values()}
        outputs = []
        for v in graph.outputs:
            if v.var.name in new_params:
                outputs.append(new_params[v.var.name])
            elif v not in written:
                outputs.append(v)
        rw.set_outputs(outputs)
        for op in reversed(doomed):
            rw.erase_op(op)
            ctx.count("optimize ops moved to servers")
        kept = set(outputs)
        for v in list(graph.inputs):
            if not graph.has_users(v) and v.var.kind != "feed" and v not in kept:
                rw.erase_value(v)
                ctx.count("state left to servers")
