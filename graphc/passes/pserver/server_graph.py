"""ps-server-graph: one parameter server's graph: the update of the parameter blocks it owns
(from the plan of ps-slice-variables), and nothing else.

Matches: every optimizer op with a block on ``endpoint`` and the optimize / lr_sched ops it
reads (regularisation, clipping, per-parameter learning rates). Produces, per owned block: a
feed per trainer (``w@GRAD.block0.trainer_0``, ...) when ``sync_mode`` with several trainers,
their ``sum`` and ``scale 1/trainers`` (the mean, as Paddle), else one feed
(``w@GRAD.block0``); the regularisation / clipping ops cloned onto the block; the optimizer
op on the block, whose optimizer state of the parameter's shape is cut to the block
(``w_velocity_0.block0``) and whose scalar state gets a copy per block. Ops shared by every
parameter (learning-rate arithmetic) are cloned once. Every other op leaves the graph. Each
new state variable records ``extra["ps_source"] = [variable, start row, end row]`` (end -1:
whole), from which ps-server-startup cuts its initial value.
``dc_asgd`` (async): each block's gradient becomes ``g + g*g*(w - w_bak)`` before the
update, ``w_bak`` fed as ``w.block0@BAK`` (the block as the sending trainer last received it).
A distributed table has no block: its rows are updated by the server loop outside the graph
(graphc/distributed/pserver/table.py), which reads the table's learning rate from the scope;
the graph keeps that learning rate as an output, so the server's startup initialises it.
Global-norm clipping (sync mode; ps_global_norm.py): the sum of squared norms becomes this
server's sum over its blocks and a ``ps_server_sum`` over every server.
Refuses (PassError): an update reading another parameter's gradient in any other way, and
global-norm clipping in async mode (no round in which every server could take part).
"""

from __future__ import annotations

from ...ir.graph import Graph, Op, Value
from ...ir.opdef import get_op_def
from ...ir.types import TensorType
from ..infra.base import Pass, PassContext, PassError, register_pass
from .global_norm import norm_sums
from .plan import blocks_of, distributed_tables, updated_pairs

SOURCE_KEY = "ps_source"


def new_input(ctx: PassContext, name: str, type: TensorType, kind: str, source) -> Value:
    """A new graph input variable of ``kind`` (feed, param or persistable) named exactly
    ``name``, recording where its value comes from (``source``)."""
    v = ctx.rewriter.new_state(name, type, 0.0)
    v.var.extra.pop("initial_value", None)  # filled by the startup program or fed
    v.var.kind = kind
    v.var.stop_gradient = kind != "param"
    if source is not None:
        v.var.extra[SOURCE_KEY] = list(source)
    return v


def update_cone(graph: Graph, op: Op) -> list[Op]:
    """The optimize / lr_sched ops ``op`` reads from, transitively, in program order, and op."""
    seen, stack = {op}, [op]
    while stack:
        for v in stack.pop().input_values():
            p = graph.producer(v)
            if p is not None and p not in seen and p.role in ("optimize", "lr_sched"):
                seen.add(p)
                stack.append(p)
    return [o for o in graph.ops() if o in seen]


class _Snapshot:
    """What is needed to clone an op after the original graph's ops are erased."""

    def __init__(self, op: Op):
        self.type, self.attrs, self.role, self.source = op.type, dict(op.attrs), op.role, op.source
        self.inputs = {s: list(vs) for s, vs in op.inputs.items()}
        self.outputs = {s: list(vs) for s, vs in op.outputs.items()}
        self.where, self.is_optimizer = op.where, bool(op.inputs.get("Param"))
        self.id = op.id


@register_pass
class PsServerGraph(Pass):
    """Keep only the update of one server's parameter blocks (server side of the transpile)."""

    name = "ps-server-graph"
    regions = "decline"
    regions_reason = ("the parameter-server split acts on the outer graph's optimizer ops and "
                      "parameters; a region op is one op there and its body stays whole")
    endpoint: str = "127.0.0.1:6174"
    trainers: int = 1
    sync_mode: bool = True
    dc_asgd: bool = False  # async only: delay-compensated gradients (Zheng et al., lambda 1)

    def run(self, graph: Graph, ctx: PassContext) -> None:
        work = []  # (optimizer snapshot, cone snapshots, param, grad, blocks here)
        tables = distributed_tables(graph)
        table_lrs = []
        pairs = updated_pairs(graph)
        norms = norm_sums(graph, [g for _, _, g in pairs])
        if norms and not self.sync_mode:
            raise PassError(f"{norms[0].op.where}: global-norm clipping on parameter servers "
                            "needs sync mode (one norm over every server's blocks per step)")
        norm_snaps = [(_Snapshot(n.op), {g: [_Snapshot(o) for o in ops]
                                         for g, ops in n.chains.items()}) for n in norms]
        skip = {n.op.id for n in norms} | {o.id for n in norms for ops in n.chains.values()
                                          for o in ops}
        for op, param, grad in pairs:
            if param.var.name in tables:
                if self.endpoint in graph.vars[param.var.name].extra.get("ps_table", ()):
                    table_lrs.append(tables[param.var.name].learning_rate)
                continue
            blocks = [b for b in blocks_of(graph, param.var.name) if b.endpoint == self.endpoint]
            cone = update_cone(graph, op)
            if blocks:
                work.append(([_Snapshot(o) for o in cone], param, grad, blocks))
        shared_inputs = self._erase_all(graph, ctx, work)
        rw = ctx.rewriter
        shared_env: dict[Value, Value] = {}
        outputs: list[Value] = []
        means = {}  # (param, block index) -> the block's mean gradient, made up front
        if norms:  # ... because the norm reads every block's before any update
            for _, param, grad, blocks in work:
                for b in blocks:
                    rows = (b.end - b.start, *param.shape[1:])
                    means[param.var.name, b.index] = self._mean_gradient(
                        ctx, b.grad, TensorType(rows, grad.dtype))
            for snap, chains in norm_snaps:
                self._global_norm(ctx, snap, chains, work, means, shared_env, shared_inputs)
        for cone, param, grad, blocks in work:
            opt = cone[-1]
            inplace = get_op_def(opt.type).inplace
            state = [opt.inputs[s][0] for s in inplace.values() if s != "Param" and s in opt.inputs]
            for b in blocks:
                split = b.param != param.var.name
                env: dict[Value, Value] = {}
                rows = (b.end - b.start, *param.shape[1:])
                if split:
                    env[param] = new_input(ctx, b.param, TensorType(rows, param.dtype), "param",
                                           [param.var.name, b.start, b.end])
                else:
                    env[param] = param
                    param.var.extra[SOURCE_KEY] = [param.var.name, 0, -1]
                for s in state:
                    if not split:
                        env[s] = s
                        s.var.extra[SOURCE_KEY] = [s.var.name, 0, -1]
                    elif s.shape == param.shape:
                        env[s] = new_input(ctx, f"{s.var.name}.block{b.index}",
                                           TensorType(rows, s.dtype), "persistable",
                                           [s.var.name, b.start, b.end])
                    else:
                        env[s] = new_input(ctx, f"{s.var.name}.block{b.index}", s.type,
                                           "persistable", [s.var.name, 0, -1])
                mean = means.get((param.var.name, b.index))
                env[grad] = mean if mean is not None else self._mean_gradient(
                    ctx, b.grad, TensorType(rows, grad.dtype))
                if self.dc_asgd:
                    env[grad] = self._compensate(ctx, env[grad], env[param], b.param)
                for snap in cone:
                    if snap.id not in skip:
                        self._clone(ctx, snap, env, shared_env, shared_inputs, b.index, split)
                outputs.append(graph.latest(env[param].var.name))
                outputs.extend(graph.latest(env[s].var.name) for s in state)
                ctx.count("blocks")
        for v in shared_inputs:  # learning rates; a schedule's counter, in its new version
            if graph.has_users(v):
                v.var.extra.setdefault(SOURCE_KEY, [v.var.name, 0, -1])
                latest = graph.latest(v.var.name)
                if latest not in outputs:
                    outputs.append(latest)
        for lr in table_lrs:
            if lr not in outputs:
                lr.var.extra[SOURCE_KEY] = [lr.var.name, 0, -1]
                outputs.append(lr)
                ctx.count("table learning rates")
        rw.set_outputs(outputs)
        for v in list(graph.inputs):
            if not graph.has_users(v) and not graph.is_output(v):
                rw.erase_value(v)
        if not work and not table_lrs:
            ctx.decline("this server owns no block")

    def _erase_all(self, graph: Graph, ctx: PassContext, work) -> list[Value]:
        """Erase every op (the snapshots keep what to clone); returns the inputs the updates
        read that are not per-parameter (learning rates), which stay."""
        rw = ctx.rewriter
        rw.set_outputs([])
        for op in reversed(graph.ops()):
            rw.erase_op(op)
        inputs = set(graph.inputs)
        shared = []
        for cone, param, grad, _ in work:
            opt = cone[-1]
            own = {param, grad, *(v for vs in opt.inputs.values() for v in vs)}
            for snap in cone[:-1]:
                own.update(v for vs in snap.outputs.values() for v in vs)
            for snap in cone:
                for vs in snap.inputs.values():
                    for v in vs:
                        if v in inputs and v not in own and v not in shared:
                            shared.append(v)
            for s, vs in opt.inputs.items():  # the learning rate is read, never owned
                if s not in get_op_def(opt.type).inplace.values() and s not in ("Param", "Grad"):
                    shared.extend(v for v in vs if v in inputs and v not in shared)
        return shared

    def _global_norm(self, ctx: PassContext, snap: _Snapshot, chains: dict, work,
                     means: dict, shared_env: dict, shared_inputs: list) -> None:
        """This server's part of a global norm's sum of squares (each owned block's chain),
        summed over every server: what the original ``sum`` op stands for from now on."""
        rw = ctx.rewriter
        parts = []
        for _, param, grad, blocks in work:
            for b in blocks:
                if grad not in chains:
                    continue
                env = {grad: means[param.var.name, b.index]}
                for op in chains[grad]:
                    self._clone(ctx, op, env, shared_env, shared_inputs, b.index, True)
                parts.append(env[chains[grad][-1].outputs["Out"][0]])
        out = snap.outputs["Out"][0]
        if not parts:  # no block of this norm here: the server still takes part
            parts = [rw.create_op("fill_constant", {}, {"Out": f"{out.var.name}@LOCAL"},
                                  {"shape": list(out.shape), "dtype": out.dtype, "value": 0.0},
                                  role="optimize").output("Out")]
        local = parts[0] if len(parts) == 1 else rw.create_op(
            "sum", {"X": parts}, {"Out": f"{out.var.name}@LOCAL"}, role="optimize").output("Out")
        shared_env[out] = rw.create_op("ps_server_sum", {"X": local}, {"Out": out.var.name},
                                       source=snap.source, role="optimize").output("Out")
        ctx.count("global norms summed over servers")

    @staticmethod
    def _compensate(ctx: PassContext, g: Value, param: Value, block: str) -> Value:
        """DC-ASGD: g + g * g * (w - w_bak), w_bak the block as the sending trainer last got
        it (fed by the server loop as ``block@BAK``)."""
        rw = ctx.rewriter
        bak = new_input(ctx, f"{block}@BAK", param.type, "feed", None)
        diff = rw.create_op("elementwise_sub", {"X": param, "Y": bak},
                            {"Out": f"{block}@DELAY"}, {"axis": -1}, role="optimize"
                            ).output("Out")
        sq = rw.create_op("elementwise_mul", {"X": g, "Y": g}, {"Out": f"{g.var.name}@SQ"},
                          {"axis": -1}, role="optimize").output("Out")
        comp = rw.create_op("elementwise_mul", {"X": sq, "Y": diff},
                            {"Out": f"{g.var.name}@COMP"}, {"axis": -1}, role="optimize"
                            ).output("Out")
        ctx.count("delay-compensated blocks")
        return rw.create_op("elementwise_add", {"X": g, "Y": comp},
                            {"Out": f"{g.var.name}@DC"}, {"axis": -1}, role="optimize"
                            ).output("Out")

    def _mean_gradient(self, ctx: PassContext, name: str, type: TensorType) -> Value:
        if not self.sync_mode or self.trainers == 1:
            return new_input(ctx, name, type, "feed", None)
        rw = ctx.rewriter
        parts = [new_input(ctx, f"{name}.trainer_{t}", type, "feed", None)
                 for t in range(self.trainers)]
        total = rw.create_op("sum", {"X": parts}, {"Out": f"{name}@SUM"}, role="optimize"
                             ).output("Out")
        return rw.create_op("scale", {"X": total}, {"Out": f"{name}@MEAN"},
                            {"scale": 1.0 / self.trainers}, role="optimize").output("Out")

    @staticmethod
    def _clone(ctx: PassContext, snap: _Snapshot, env: dict, shared_env: dict,
               shared_inputs: list, index: int, split: bool) -> None:
        rw = ctx.rewriter
        per_block = any(v in env for vs in snap.inputs.values() for v in vs)
        if not per_block and all(v in shared_env for vs in snap.outputs.values() for v in vs):
            return  # a shared op (learning-rate arithmetic) already cloned
        ins = {}
        for slot, vs in snap.inputs.items():
            mapped = []
            for v in vs:
                if v in env:
                    mapped.append(env[v])
                elif v in shared_env:
                    mapped.append(shared_env[v])
                elif v in shared_inputs:
                    mapped.append(v)
                else:
                    raise PassError(f"{snap.where}: the update reads '{v.var.name}', which is "
                                    "neither this parameter's nor shared by every update "
                                    "(global-norm clipping?): not supported on parameter "
                                    "servers yet")
            ins[slot] = mapped
        inplace = get_op_def(snap.type).inplace
        outs = {}
        for slot, vs in snap.outputs.items():
            src = snap.inputs.get(inplace.get(slot), [None])[0]
            if src is not None and vs[0].var is src.var:  # updated in place: a new version
                outs[slot] = [rw.new_version(ins[inplace[slot]][0])]
            else:
                outs[slot] = [f"{v.var.name}.block{index}" if split and per_block
                              else v.var.name for v in vs]
        op = rw.create_op(snap.type, ins, outs, snap.attrs, source=snap.source,
                          role=snap.role)
        target = env if per_block else shared_env
        for slot, vs in snap.outputs.items():
            for v, new in zip(vs, op.outputs[slot]):
                target[v] = new
        ctx.count("update ops")
