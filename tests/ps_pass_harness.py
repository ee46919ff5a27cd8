"""Shared by the ps-* pass tests: a small seeded regression MLP whose 8x8 weight is cut in two
blocks, the passes run as the transpiler runs them (they split a graph, so not through a
PassManager, which refuses dropped outputs), golden text, and an in-process stand-in for the
servers that runs the server graphs on what a trainer graph sends."""

from __future__ import annotations

import contextlib

import numpy as np
from pass_harness import golden_text as _golden_text

import graphc.fluid as fluid
from graphc.backends.interpreter import run_graph
from graphc.ir import lower
from graphc.passes import PassContext, make_pass
from graphc.passes.pserver.plan import PLAN_KEY
from graphc.passes.pserver.server_graph import SOURCE_KEY

EPS = ["127.0.0.1:6170", "127.0.0.1:6171"]
WIDTH = 8  # fc_0.w_0 is 8x8 = 64 elements: two blocks of 4 rows at min_block_size 16
OPTIMIZERS = {"momentum": lambda reg: fluid.optimizer.Momentum(0.05, 0.9, regularization=reg),
              "sgd": lambda reg: fluid.optimizer.SGD(0.1, regularization=reg),
              "adam": lambda reg: fluid.optimizer.Adam(0.01, regularization=reg)}


def build(optimizer: str | None = "momentum", l2: bool = True, seed: int = 7):
    """x[8] -> fc(8, tanh) -> fc(1) -> square error; ``optimizer`` None: forward only.
    Names are fixed (a fresh name guard), so two builds share every variable name."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [-1, WIDTH], "float32")
        y = fluid.data("y", [-1, 1], "float32")
        h = fluid.layers.fc(x, WIDTH, act="tanh")
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(h, 1), y))
        if optimizer is not None:
            OPTIMIZERS[optimizer](fluid.regularizer.L2Decay(0.01) if l2 else None
                                  ).minimize(loss)
    return main, startup, loss


def feeds(batch: int = 4, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, WIDTH)).astype("float32"),
            "y": rng.standard_normal((batch, 1)).astype("float32")}


def slicer(**options):
    return make_pass("ps-slice-variables", endpoints=EPS, min_block_size=16, **options)


def apply(graph, *passes):
    """Run ``passes`` on ``graph`` in place, verifying after each; the last one's stats."""
    stats: dict = {}
    for p in passes:
        ctx = PassContext(graph, p.name)
        p.run(graph, ctx)
        graph.verify()
        stats = dict(ctx.stats)
    return stats


def run_ps(program, *passes):
    """(graph after all but the last pass, after all of them, the last pass's stats)."""
    before, after = lower(program), lower(program)
    apply(before, *passes[:-1])
    stats = apply(after, *passes)
    return before, after, stats


def golden_text(name, before, after, stats) -> str:
    return _golden_text(name, before, after, stats)


def plan_of(graph) -> dict[str, list]:
    """Parameter -> its blocks [index, param block, grad block, start, end, endpoint]."""
    return {n: v.extra[PLAN_KEY] for n, v in graph.vars.items() if PLAN_KEY in v.extra}


def server_startup_entries(server_graph) -> list[list]:
    """What ps-server-startup cuts for a server graph: its new state's sources."""
    return [[v.var.name, *v.var.extra[SOURCE_KEY]] for v in server_graph.inputs
            if v.var.extra.get(SOURCE_KEY) is not None]


def server_state(main, startup, endpoint, trainers=1, **server_options):
    """(server graph, its initial state) from the passes alone."""
    server = lower(main)
    apply(server, slicer(), make_pass("ps-server-graph", endpoint=endpoint, trainers=trainers,
                                      **server_options))
    sgraph = lower(startup)
    apply(sgraph, make_pass("ps-server-startup", blocks=server_startup_entries(server)))
    return server, run_graph(sgraph)[0]


class Servers:
    """Stands in for the MPI channel: holds each server's graph and state; ``send`` stores the
    gradient blocks, ``recv`` runs every server's graph on them (one trainer) and answers the
    updated blocks; ``recv(initial=True)`` answers the servers' initial blocks."""

    def __init__(self, main, startup):
        self.graphs, self.states, self.sent, self.calls = {}, {}, {}, []
        for ep in EPS:
            self.graphs[ep], self.states[ep] = server_state(main, startup, ep)
        self.stepped = False

    def send(self, names, epmap, arrays):
        self.calls.append("send")
        self.sent.update((n, np.asarray(a)) for n, a in zip(names, arrays))

    def send_barrier(self):
        self.calls.append("send_barrier")

    def _step(self):
        for ep, graph in self.graphs.items():
            wanted = {v.var.name for v in graph.inputs if v.var.kind == "feed"}
            self.states[ep] = {**self.states[ep], **run_graph(
                graph, self.states[ep], {n: self.sent[n] for n in wanted})[0]}
        self.stepped = True

    def recv(self, names, epmap, initial=False):
        if not initial:
            self.calls.append("recv")
            if not self.stepped:
                self._step()
        return [self.states[ep][n] for n, ep in zip(names, epmap)]

    def fetch_barrier(self):
        self.calls.append("fetch_barrier")


@contextlib.contextmanager
def channel(ch):
    """Route send/recv ops to ``ch`` for the duration: host services holding it are in
    effect for the rules the interpreter runs (an Executor passes its own the same way)."""
    from graphc.backends.lowering import services_in_effect
    from graphc.runtime.host_services import HostServices
    with services_in_effect(HostServices(channel=ch)):
        yield ch
