"""The parameter-server transpile, graphc-native: run the ps-* passes over one training program
and hand back the trainer program and each server's program and startup program."""

from __future__ import annotations

from dataclasses import dataclass

from ...ir.clone import clone_graph
from ...ir.graph import Graph, lower
from ...ir.program import Program
from ...passes import PassContext, make_pass
from ...passes.infra.regions import apply_in_regions
from ...passes.pserver.plan import (
    PLAN_KEY,
    distributed_tables,
    prefetched_tables,
    updated_pairs,
)
from ...passes.pserver.server_graph import SOURCE_KEY
from ..programs import ServerInfo, ServerProgram
from .protocol import PServerError


@dataclass(frozen=True)
class Plan:
    """One transpile's parameter-server plan, what trainers and servers must agree on: every
    parameter's blocks, the gradient blocks that travel as rows, the remote-prefetched
    tables, and each distributed table's shard spec."""

    blocks: dict  # parameter -> [[index, param block, grad block, start, end, endpoint]]
    row_grads: tuple[str, ...]
    prefetched: tuple[str, ...]
    tables: tuple[dict, ...]


class Transpiler:
    """``Transpiler(endpoints, trainers, trainer_id, ...).transpile(main, startup)``.

    ``trainer_graph`` / ``server_graph(ep)`` are the SSA graphs (print, verify, diff);
    ``trainer_program()`` / ``server_program(ep)`` / ``server_startup(ep)`` the Programs.

    ``transpile`` lowers the main program once and slices it once (``plan``); the trainer's
    and each server's graph are rewrites of copies of that sliced graph, and the startup
    programs rewrites of copies of one lowering of the startup program.
    """

    def __init__(self, endpoints: list[str], trainers: int = 1, trainer_id: int = 0,
                 sync_mode: bool = True, slice_var_up: bool = True, min_block_size: int = 8192,
                 split_method: str = "round_robin", verify: bool = True,
                 geo_push_nums: int | None = None, dc_asgd: bool = False):
        if not endpoints:
            raise PServerError("a parameter-server job needs at least one server endpoint")
        if trainers < 1 or not 0 <= trainer_id < trainers:
            raise PServerError(f"trainer_id must be in [0, {trainers}), got {trainer_id} "
                               f"(trainers={trainers})")
        self.endpoints, self.trainers, self.trainer_id = list(endpoints), trainers, trainer_id
        # GEO-SGD (geo_push_nums = k): trainers keep the optimizer, push deltas every k steps
        self.geo_push_nums = geo_push_nums
        self.sync_mode, self.verify = sync_mode and geo_push_nums is None, verify
        if dc_asgd and (self.sync_mode or geo_push_nums is not None):
            raise PServerError("DC-ASGD compensates stale gradients: it needs async mode "
                               "(sync_mode=False, no GEO)")
        self.dc_asgd = dc_asgd
        self.slicer = make_pass("ps-slice-variables", endpoints=self.endpoints,
                                slice_var_up=slice_var_up, min_block_size=min_block_size,
                                split_method=split_method)
        self.main: Program | None = None
        self.plan: Plan | None = None
        self._sliced: Graph | None = None  # the main program, lowered and sliced
        self._startup_graph: Graph | None = None
        self._servers: dict[str, tuple] = {}

    def _apply(self, graph: Graph, *passes) -> tuple[Graph, list]:
        """Apply ``passes`` to ``graph`` in place, verifying after each. Not a PassManager
        pipeline: these passes split a graph, so they drop outputs (another server's
        blocks, the trainer's optimizer state), which the manager refuses by design."""
        results = []
        for p in passes:
            ctx = PassContext(graph, p.name)
            p.run(graph, ctx)
            apply_in_regions(p, graph, ctx)  # the ps-* passes decline inside region bodies
            if self.verify:
                graph.verify()
            results.append((p.spec(), dict(ctx.stats)))
        return graph, results

    def transpile(self, main: Program, startup: Program) -> Transpiler:
        self.main, self.startup = main, startup
        if self.geo_push_nums is not None:
            trainer = make_pass("ps-geo-trainer-graph", trainer_id=self.trainer_id,
                                trainers=self.trainers, push_nums=self.geo_push_nums)
        else:
            # DC-ASGD keeps each trainer's copy of every block: tables stay replicas then
            trainer = make_pass("ps-trainer-graph", trainer_id=self.trainer_id,
                                sync_mode=self.sync_mode, prefetch=not self.dc_asgd)
        graph = lower(main)  # the one lowering of the main program
        tables, sgraph = self._table_specs(graph, startup)
        defer_table_init(startup, [t["name"] for t in tables], sgraph)
        self._startup_graph = None  # lowered when first needed, after defer_table_init
        self._sliced, slicing = self._apply(graph, self.slicer)
        self.plan = self._make_plan(self._sliced, tables)
        self.trainer_graph, results = self._apply(clone_graph(self._sliced), trainer)
        self.trainer_pipeline = slicing + results
        self._servers.clear()
        return self

    def _table_specs(self, graph: Graph, startup: Program) -> tuple[tuple[dict, ...], Graph]:
        """What a server needs to hold each distributed table's shard: shape, padding, the
        learning rate's name and the initializer it draws rows from; and the startup
        program's graph they were read from (None without tables)."""
        tables = distributed_tables(graph)
        if tables and self.geo_push_nums is not None:
            raise PServerError(f"distributed tables {sorted(tables)}: GEO-SGD keeps the "
                               "parameters on the trainers, a distributed table lives on the "
                               "servers (Paddle refuses it too): use sync or async mode")
        if tables and self.dc_asgd:
            raise PServerError(f"distributed tables {sorted(tables)}: DC-ASGD would keep a "
                               "copy of every table per trainer: not supported")
        sgraph = lower(startup) if tables else None
        return tuple({"name": name, "height": t.height, "width": t.width, "dtype": t.dtype,
                      "padding_idx": t.padding_idx, "lr": t.learning_rate.var.name,
                      "init": _table_init(sgraph, name)}
                     for name, t in sorted(tables.items())), sgraph

    def _make_plan(self, graph: Graph, tables: tuple[dict, ...]) -> Plan:
        """The plan the slicing left on ``graph``: every block, the gradients that travel as
        rows, the remote-prefetched tables."""
        blocks = {name: info.extra[PLAN_KEY] for name, info in graph.vars.items()
                  if PLAN_KEY in info.extra}
        names = {t["name"] for t in tables}
        rows = tuple(b[2] for _, param, grad in updated_pairs(graph)
                     if grad.type.sparse and param.var.name not in names
                     for b in blocks[param.var.name])
        replicas = self.dc_asgd or self.geo_push_nums is not None  # tables stay replicas
        prefetched = () if replicas else tuple(sorted(prefetched_tables(graph)))
        return Plan(blocks, rows, prefetched, tables)

    def _require_plan(self) -> Plan:
        if self.plan is None:
            raise PServerError("call transpile(main, startup) first")
        return self.plan

    @property
    def tables(self) -> list[dict]:
        """Each distributed table's shard spec (what a server's RowTable holds)."""
        return list(self._require_plan().tables)

    def row_gradients(self) -> list[str]:
        """The gradient blocks that travel as rows (is_sparse parameters cut in blocks)."""
        return list(self._require_plan().row_grads)

    def prefetched(self) -> list[str]:
        """is_sparse tables trainers pull rows of (remote prefetch), never receiving them."""
        return list(self._require_plan().prefetched)

    # -- plan ------------------------------------------------------------------------
    def blocks(self) -> dict[str, list[list]]:
        """Parameter -> its blocks ``[index, param block, grad block, start, end, endpoint]``."""
        return dict(self._require_plan().blocks)

    def _startup(self) -> Graph:
        """A copy of the (deferred) startup program, lowered once per transpile."""
        if self._startup_graph is None:
            self._startup_graph = lower(self.startup)
        return clone_graph(self._startup_graph)

    # -- servers -------------------------------------------------------------------
    def server_graph(self, endpoint: str):
        return self._server(endpoint)[0]

    def _server(self, endpoint: str):
        if endpoint not in self.endpoints:
            raise PServerError(f"endpoint '{endpoint}' is not one of the servers "
                               f"{self.endpoints}")
        self._require_plan()
        if endpoint not in self._servers:
            if self.geo_push_nums is not None:
                server = make_pass("ps-geo-server-graph", endpoint=endpoint)
            else:
                server = make_pass("ps-server-graph", endpoint=endpoint, trainers=self.trainers,
                                   sync_mode=self.sync_mode, dc_asgd=self.dc_asgd)
            graph, _ = self._apply(clone_graph(self._sliced), server)
            entries = []
            for v in graph.inputs:
                src = v.var.extra.get(SOURCE_KEY)
                if src is not None:
                    entries.append([v.var.name, *src])
            sgraph, _ = self._apply(self._startup(), make_pass("ps-server-startup",
                                                               blocks=entries))
            self._servers[endpoint] = (graph, sgraph)
        return self._servers[endpoint]

    def server_info(self, endpoint: str) -> ServerInfo:
        plan = self._require_plan()
        return ServerInfo(endpoint=endpoint, endpoints=tuple(self.endpoints),
                          server_id=self.endpoints.index(endpoint), trainers=self.trainers,
                          sync_mode=self.sync_mode, geo=self.geo_push_nums is not None,
                          dc_asgd=self.dc_asgd, tables=plan.tables,
                          prefetch_blocks=tuple(b[1] for name in plan.prefetched
                                                for b in plan.blocks[name]),
                          row_grads=plan.row_grads)

    def server_program(self, endpoint: str) -> ServerProgram:
        """``endpoint``'s program; ``exe.run(it)`` serves until every trainer completes, as
        in Paddle."""
        return ServerProgram(self._server(endpoint)[0].to_program(), self.server_info(endpoint))

    def server_startup(self, endpoint: str) -> Program:
        return self._server(endpoint)[1].to_program()

    # -- trainer ---------------------------------------------------------------------
    def trainer_startup(self) -> Program:
        """The startup program with the parameters' initial values pulled from the servers
        (Paddle's trainer startup: recv, fetch_barrier, concat)."""
        skip = set(self.prefetched())  # their rows are pulled when needed
        params = [[name, [[b[1], b[5], b[4] - b[3]] for b in blocks]]
                  for name, blocks in self.blocks().items() if name not in skip]
        graph, _ = self._apply(self._startup(), make_pass("ps-trainer-startup", params=params,
                                                          trainer_id=self.trainer_id))
        self.trainer_startup_graph = graph
        return graph.to_program()

    def trainer_program(self) -> Program:
        self._require_plan()
        return self.trainer_graph.to_program()


def _table_init(startup_graph, name: str) -> dict:
    """How a server draws the rows of table ``name``: its initializer op in the startup
    graph (row-keyed random, or a constant) and the seed that op draws from."""
    from ...backends.evaluate import op_seed
    if name not in startup_graph.vars:
        raise PServerError(f"the distributed table '{name}' is not initialised by the startup "
                           "program passed to transpile()")
    op = startup_graph.producer(startup_graph.latest(name))
    kind = op.type if op is not None else None
    if kind == "fill_constant":
        return {"type": kind, "attrs": {"value": op.attrs["value"]}, "seed": 0}
    if kind in ("uniform_random", "gaussian_random") and op.attrs.get("row_keyed"):
        keep = ("shape", "dtype", "min", "max") if kind == "uniform_random" else (
            "shape", "dtype", "mean", "std")
        return {"type": kind, "attrs": {k: op.attrs[k] for k in keep},
                "seed": op.attrs["seed"] or op_seed(startup_graph, op)}
    raise PServerError(f"the distributed table '{name}' is initialised by "
                       f"{kind or 'no op'}{'' if kind is None else ' without row_keyed'}: "
                       "servers draw a table's rows one by one, from a uniform or normal "
                       "initializer of embedding(is_distributed=True), or a constant")


def defer_table_init(startup: Program, tables: list[str], graph: Graph | None = None) -> None:
    """Paddle's ``fake_init``, in place: the startup program no longer makes the distributed
    tables ``tables`` (their rows are drawn by the servers, a few at a time), so no process
    ever holds a whole table. Every other random initializer first gets the seed it drew from
    as its own ``seed`` attribute, so removing an op does not move the others' positions in
    the random stream: every value stays what a local run of the program draws. ``graph``:
    ``startup`` already lowered (it is not changed)."""
    if not tables:
        return
    from ...backends.evaluate import op_seed
    graph = lower(startup) if graph is None else graph
    seeds: dict[str, list[int]] = {}
    for op in graph.ops():
        if op.type in ("uniform_random", "gaussian_random") and not op.attrs.get("seed"):
            seeds.setdefault(op.outputs["Out"][0].var.name, []).append(op_seed(graph, op))
    block = startup.global_block()
    doomed = []
    for i, op in enumerate(block.ops):
        outs = op.output("Out")
        if any(n in tables for n in outs):
            doomed.append(i)
        elif op.type in ("uniform_random", "gaussian_random") and not op.attrs.get("seed") \
                and seeds.get(outs[0]):
            op.set_attr("seed", seeds[outs[0]].pop(0))
    for i in reversed(doomed):
        block._remove_op(i)
    for name in tables:
        block.vars.pop(name, None)
    startup._bump()
