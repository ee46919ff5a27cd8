"""Emit one jitted XLA program per training/inference step from an SSA graph.

State that the step updates is donated (updated in place); unchanged state is only read.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax

from ...ir.graph import Graph, Op
from ...ir.ops import RANDOM, forward_type, get_op_def
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
        fetched = set(self.fetch_values)

        def used(v) -> bool:  # read by an op, or fetched as it is
            return bool(graph.nx.succ[v]) or v in fetched

        self.readonly_inputs = [v for v in state_inputs if final.get(v.var.name, v) is v
                                and used(v)]
        self.feed_inputs = [v for v in graph.inputs if v.var.kind == "feed" and used(v)]
        self.updated_outputs = [final[v.var.name] for v in self.updated_inputs]
        # Persistables first created by the step (startup programs) are outputs too.
        inputs_by_var = {v.var.name for v in state_inputs}
        self.created_outputs = [v for v in graph.outputs if v.var.name not in inputs_by_var]
        # Variable names in argument order, so a runtime need not walk Values on every run.
        self.updated_names = [v.var.name for v in self.updated_inputs]
        self.readonly_names = [v.var.name for v in self.readonly_inputs]
        self.state_names = self.updated_names + self.readonly_names
        self.feed_names = [v.var.name for v in self.feed_inputs]
        self.created_names = [v.var.name for v in self.created_outputs]
        self._ops = graph.ops()
        self.uses_step_counter = any(_is_random(op) for op in self._ops)
        self.donate = donate
        self.feed_shapes: dict[str, tuple] = {}  # set by the runtime for inspection
        self._jitted = jax.jit(self._step, donate_argnums=(0,) if donate else ())

    def _step(self, updated, readonly, feeds, step):
        """``step`` is None when no op is random (see ``_is_random``)."""
        env = dict(zip(self.updated_inputs, updated))
        env.update(zip(self.readonly_inputs, readonly))
        env.update(zip(self.feed_inputs, feeds))
        evaluate(self.graph, env, step, ops=self._ops)
        return (tuple(env[v] for v in self.updated_outputs),
                tuple(env[v] for v in self.created_outputs),
                tuple(env[v] for v in self.fetch_values))

    def _args(self, updated, readonly, feeds, step) -> tuple:
        # Only random ops read the run counter; for the others passing None spares JAX
        # converting a Python int on every call (a few microseconds of each run).
        return (tuple(updated), tuple(readonly), tuple(feeds),
                step if self.uses_step_counter else None)

    def __call__(self, updated, readonly, feeds, step):
        return self._jitted(*self._args(updated, readonly, feeds, step))

    # -- inspection -------------------------------------------------------------------
    def abstract_args(self, feed_shapes: dict[str, tuple] | None = None) -> tuple:
        """Shape/dtype stand-ins for every argument; feeds with -1 dims need a shape."""
        feed_shapes = feed_shapes if feed_shapes is not None else self.feed_shapes

        def spec(v, shape=None):
            shape = tuple(v.type.shape if shape is None else shape)
            if any(d < 0 for d in shape):
                raise ValueError(f"give a concrete shape for feed '{v.var.name}' ({v.type})")
            return jax.ShapeDtypeStruct(shape, v.type.dtype)

        return self._args([spec(v) for v in self.updated_inputs],
                          [spec(v) for v in self.readonly_inputs],
                          [spec(v, feed_shapes.get(v.var.name)) for v in self.feed_inputs], 0)

    def lower(self, feed_shapes: dict[str, tuple] | None = None):
        """jax's Lowered for these feed shapes (default: those it was compiled for)."""
        return self._jitted.lower(*self.abstract_args(feed_shapes))

    def lowered_text(self, feed_shapes=None) -> str:
        """The step as StableHLO text, before XLA's optimisations."""
        return self.lower(feed_shapes).as_text()

    def compiled_text(self, feed_shapes=None) -> str:
        """The step as optimised HLO text, after XLA's fusions."""
        return self.lower(feed_shapes).compile().as_text()

    def cost_analysis(self, feed_shapes=None) -> dict:
        """XLA's estimate: flops, bytes accessed, ... of one step."""
        cost = self.lower(feed_shapes).compile().cost_analysis()
        return dict(cost[0] if isinstance(cost, list) else cost or {})

    def memory_analysis(self, feed_shapes=None):
        """XLA's buffer sizes: arguments, outputs, temporaries, aliased (donated) bytes."""
        return self.lower(feed_shapes).compile().memory_analysis()


def _is_random(op: Op) -> bool:
    """Whether the op draws random numbers (RuleContext.rng folds in the run counter).

    A gradient op without its own rule re-runs its forward op, so that one counts too. A rule
    that draws without the RANDOM trait gets a None counter and fails loudly, never silently.
    """
    types = (op.type, forward_type(op.type))
    return any(t is not None and get_op_def(t).has_trait(RANDOM) for t in types)


def compile_step(graph: Graph, fetch: Sequence = (), donate: bool = True) -> CompiledStep:
    return CompiledStep(graph, fetch, donate)
