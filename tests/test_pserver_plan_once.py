"""The parameter-server transpile lowers the main program once and slices it once (issue 23):
the trainer's and each server's graph are rewrites of copies of that one sliced graph, and
the programs it hands out are typed (ServerProgram with its ServerInfo)."""

from __future__ import annotations

import sys

import pytest
from test_pserver_transpile import EPS, build

import graphc.fluid
import graphc.ir.graph as ir_graph
from graphc.distributed.programs import ServerInfo, ServerProgram
from graphc.distributed.pserver import Transpiler
from graphc.ir.clone import clone_graph
from graphc.ir.graph import lower
from graphc.passes.pserver.server_graph import PsServerGraph
from graphc.passes.pserver.slice_variables import PsSliceVariables
from graphc.passes.pserver.trainer_graph import PsTrainerGraph
from graphc.runtime.run_as import LoopProgram


@pytest.fixture
def spies(monkeypatch):
    """Counts: programs lowered (by identity), and runs of the slicing, trainer and server
    passes. ``lower`` is replaced wherever a graphc module imported it by name."""
    lowered: list = []
    runs = {"slice": 0, "trainer": 0, "server": 0}
    real = ir_graph.lower

    def spy(program):
        lowered.append(program)
        return real(program)

    for name, module in list(sys.modules.items()):
        if name.startswith("graphc") and getattr(module, "lower", None) is real:
            monkeypatch.setattr(module, "lower", spy)
    for key, cls in (("slice", PsSliceVariables), ("trainer", PsTrainerGraph),
                     ("server", PsServerGraph)):
        def counted(self, graph, ctx, _run=cls.run, _key=key):
            runs[_key] += 1
            return _run(self, graph, ctx)
        monkeypatch.setattr(cls, "run", counted)
    return lowered, runs


def test_sync_two_server_transpile_lowers_main_once_and_slices_once(spies):
    lowered, runs = spies
    main, startup = build()
    t = Transpiler(EPS, trainers=2).transpile(main, startup)
    sliced = t._sliced.to_text()
    programs = [t.trainer_program(), t.trainer_startup()]
    for ep in EPS:
        programs += [t.server_program(ep), t.server_startup(ep)]
    assert sum(p is main for p in lowered) == 1
    assert sum(p is startup for p in lowered) == 1  # every startup rewrites a copy
    assert runs == {"slice": 1, "trainer": 1, "server": 2}
    # the rewrites left the shared sliced graph as the slicing made it
    assert t._sliced.to_text() == sliced
    assert all(p.global_block().ops for p in programs)


@pytest.mark.parametrize("mode", [{"sync_mode": False}, {"sync_mode": False, "dc_asgd": True},
                                  {"geo_push_nums": 2}], ids=["async", "dc-asgd", "geo"])
def test_every_mode_lowers_main_once_and_slices_once(spies, mode):
    lowered, runs = spies
    main, startup = build()
    t = Transpiler(EPS, trainers=2, **mode).transpile(main, startup)
    t.trainer_program(), t.trainer_startup()
    for ep in EPS:
        t.server_program(ep), t.server_startup(ep)
    assert sum(p is main for p in lowered) == 1 and runs["slice"] == 1
    assert sum(p is startup for p in lowered) == 1


def test_distributed_tables_lower_main_once_and_startup_twice(spies):
    """A distributed table's initializer is read from the startup program, which then loses
    it (defer_table_init): one lowering before that change, one after."""
    import pserver_sparse_job as job
    lowered, runs = spies
    with graphc.fluid.unique_name.guard():
        main, startup, _ = job.build()
    t = Transpiler(job.ENDPOINTS.split(","), trainers=2).transpile(main, startup)
    t.trainer_program(), t.trainer_startup()
    for ep in t.endpoints:
        assert t.server_program(ep).info.tables[0]["name"] == "ctr_table"
        t.server_startup(ep)
    assert sum(p is main for p in lowered) == 1 and runs["slice"] == 1
    assert sum(p is startup for p in lowered) == 2


def test_server_programs_are_typed_and_run_their_own_loop():
    main, startup = build()
    t = Transpiler(EPS, trainers=2).transpile(main, startup)
    for i, ep in enumerate(EPS):
        prog = t.server_program(ep)
        assert isinstance(prog, ServerProgram) and isinstance(prog, LoopProgram)
        assert isinstance(prog.info, ServerInfo)
        assert (prog.info.endpoint, prog.info.server_id, prog.info.trainers) == (ep, i, 2)
        assert prog.info.sync_mode and not prog.info.geo and prog.loaded_tables is None
        assert all(b.program is prog for b in prog.blocks)
    trainer = t.trainer_program()
    assert type(trainer) is not ServerProgram and not hasattr(trainer, "_ps_trainer")


def test_clone_is_independent_and_equal():
    main, _ = build()
    g = lower(main)
    c = clone_graph(g)
    assert c.to_text() == g.to_text() and c.structurally_equal(g)
    assert [op.id for op in c.ops()] == [op.id for op in g.ops()]
    assert not set(map(id, c.vars.values())) & set(map(id, g.vars.values()))
    before = g.to_text()
    rw = c.rewriter()
    first = c.ops()[0]
    momentum = next(op for op in c.ops() if op.type == "momentum")
    rw.set_attr(momentum, "mu", 0.5)
    rw.create_op("scale", {"X": c.value("x")}, {"Out": "x_scaled"}, {"scale": 2.0},
                 after=first)
    c.vars["fc_0.w_0"].extra["mark"] = 1
    c.verify()
    assert "x_scaled" in c.to_text() and momentum.attrs["mu"] == 0.5
    assert g.ops_by_id[momentum.id].attrs["mu"] == 0.9
    assert g.to_text() == before and "mark" not in g.vars["fc_0.w_0"].extra
    g.verify()
