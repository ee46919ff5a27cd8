"""The parameter-server transpile, graphc-native: run the ps-* passes over one training program
and hand back the trainer program and each server's program and startup program."""

from __future__ import annotations

import functools

from ...ir.graph import lower
from ...ir.program import Program
from ...passes import PassContext, make_pass
from ...passes.ps_server_graph import SOURCE_KEY
from .protocol import PServerError


class Transpiler:
    """``Transpiler(endpoints, trainers, trainer_id, ...).transpile(main, startup)``.

    ``trainer_graph`` / ``server_graph(ep)`` are the SSA graphs (print, verify, diff);
    ``trainer_program()`` / ``server_program(ep)`` / ``server_startup(ep)`` the Programs.
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
        self._servers: dict[str, tuple] = {}

    def _run(self, program: Program, *passes):
        """Lower ``program`` and apply ``passes``, verifying after each. Not a PassManager
        pipeline: these passes split a graph, so they drop outputs (another server's
        blocks, the trainer's optimizer state), which the manager refuses by design."""
        graph = lower(program)
        results = []
        for p in passes:
            ctx = PassContext(graph, p.name)
            p.run(graph, ctx)
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
            trainer = make_pass("ps-trainer-graph", trainer_id=self.trainer_id,
                                sync_mode=self.sync_mode)
        self.trainer_graph, self.trainer_pipeline = self._run(main, self.slicer, trainer)
        self._servers.clear()
        return self

    # -- plan ------------------------------------------------------------------------
    def blocks(self) -> dict[str, list[list]]:
        """Parameter -> its blocks ``[index, param block, grad block, start, end, endpoint]``."""
        graph, _ = self._run(self.main, self.slicer)
        return {name: info.extra["ps_blocks"] for name, info in graph.vars.items()
                if "ps_blocks" in info.extra}

    # -- servers -------------------------------------------------------------------
    def server_graph(self, endpoint: str):
        return self._server(endpoint)[0]

    def _server(self, endpoint: str):
        if endpoint not in self.endpoints:
            raise PServerError(f"endpoint '{endpoint}' is not one of the servers "
                               f"{self.endpoints}")
        if endpoint not in self._servers:
            if self.geo_push_nums is not None:
                server = make_pass("ps-geo-server-graph", endpoint=endpoint)
            else:
                server = make_pass("ps-server-graph", endpoint=endpoint, trainers=self.trainers,
                                   sync_mode=self.sync_mode, dc_asgd=self.dc_asgd)
            graph, _ = self._run(self.main, self.slicer, server)
            entries = []
            for v in graph.inputs:
                src = v.var.extra.get(SOURCE_KEY)
                if src is not None:
                    entries.append([v.var.name, *src])
            sgraph, _ = self._run(self.startup, make_pass("ps-server-startup", blocks=entries))
            self._servers[endpoint] = (graph, sgraph)
        return self._servers[endpoint]

    def server_info(self, endpoint: str) -> dict:
        return {"endpoint": endpoint, "endpoints": list(self.endpoints),
                "server_id": self.endpoints.index(endpoint), "trainers": self.trainers,
                "sync_mode": self.sync_mode, "geo": self.geo_push_nums is not None,
                "dc_asgd": self.dc_asgd}

    def server_program(self, endpoint: str) -> Program:
        prog = self._server(endpoint)[0].to_program()
        prog._ps_server = self.server_info(endpoint)
        # exe.run(pserver_program) serves until every trainer completes, as in Paddle
        prog.run_in_executor = functools.partial(_serve, prog)
        return prog

    def server_startup(self, endpoint: str) -> Program:
        return self._server(endpoint)[1].to_program()

    # -- trainer ---------------------------------------------------------------------
    def trainer_startup(self) -> Program:
        """The startup program with the parameters' initial values pulled from the servers
        (Paddle's trainer startup: recv, fetch_barrier, concat)."""
        params = [[name, [[b[1], b[5], b[4] - b[3]] for b in blocks]]
                  for name, blocks in self.blocks().items()]
        graph, _ = self._run(self.startup, make_pass("ps-trainer-startup", params=params,
                                                     trainer_id=self.trainer_id))
        self.trainer_startup_graph = graph
        return graph.to_program()

    def trainer_program(self) -> Program:
        prog = self.trainer_graph.to_program()
        prog._ps_trainer = {"trainer_id": self.trainer_id, "endpoints": list(self.endpoints),
                            "trainers": self.trainers, "sync_mode": self.sync_mode}
        return prog


def _serve(program, executor, scope):
    from .server import serve
    return serve(program, executor, scope)
