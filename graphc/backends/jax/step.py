"""Emit one jitted XLA program per training/inference step from an SSA graph.

State that the step updates is donated (updated in place); unchanged state is only read.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax

from ...ir.graph import Graph
from ..evaluate import evaluate
from ..interpreter import resolve_fetch


class CompiledStep:
    """A graph as a jitted step. Call with (updated, readonly, feeds, step) tuples.

    ``updated_inputs``: state variables the step writes (their buffers are donated);
    ``readonly_inputs``: state it only reads; ``feed_inputs``: fed values it uses;
    ``updated_outputs[i]`` is the new value of ``updated_inputs[i]``'s variable.
    """

    def __init__(self, graph: Graph, fetch: Sequence, donate: bool = True):
        self.graph = graph
        self.fetch_values = [resolve_fetch(graph, f) for f in fetch]
        final = {v.var.name: v for v in graph.outputs}
        state_inputs = [v for v in graph.inputs if v.var.kind != "feed"]
        # A persistable written by the step: its final version differs from its input.
        self.updated_inputs = [v for v in state_inputs if final.get(v.var.name, v) is not v]
        self.readonly_inputs = [v for v in state_inputs if final.get(v.var.name, v) is v
                                and graph.nx.succ[v]]
        self.feed_inputs = [v for v in graph.inputs if v.var.kind == "feed" and graph.nx.succ[v]]
        self.updated_outputs = [final[v.var.name] for v in self.updated_inputs]
        # Persistables first created by the step (startup programs) are outputs too.
        inputs_by_var = {v.var.name for v in state_inputs}
        self.created_outputs = [v for v in graph.outputs if v.var.name not in inputs_by_var]
        self._ops = graph.ops()
        self.donate = donate
        self._jitted = jax.jit(self._step, donate_argnums=(0,) if donate else ())

    def _step(self, updated, readonly, feeds, step):
        env = dict(zip(self.updated_inputs, updated))
        env.update(zip(self.readonly_inputs, readonly))
        env.update(zip(self.feed_inputs, feeds))
        evaluate(self.graph, env, step, ops=self._ops)
        return (tuple(env[v] for v in self.updated_outputs),
                tuple(env[v] for v in self.created_outputs),
                tuple(env[v] for v in self.fetch_values))

    def __call__(self, updated, readonly, feeds, step):
        return self._jitted(tuple(updated), tuple(readonly), tuple(feeds), step)

    # -- inspection -------------------------------------------------------------------
    def lower(self, updated, readonly, feeds, step=0):
        return self._jitted.lower(tuple(updated), tuple(readonly), tuple(feeds), step)

    def lowered_text(self, *args) -> str:
        """StableHLO text of the step for these example arguments."""
        return self.lower(*args).as_text()

    def cost_analysis(self, *args) -> dict:
        cost = self.lower(*args).compile().cost_analysis()
        return cost[0] if isinstance(cost, list) else dict(cost or {})

    def memory_analysis(self, *args):
        return self.lower(*args).compile().memory_analysis()


def compile_step(graph: Graph, fetch: Sequence = (), donate: bool = True) -> CompiledStep:
    return CompiledStep(graph, fetch, donate)
