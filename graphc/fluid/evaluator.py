"""``fluid.evaluator``: Paddle 1.8's deprecated in-program evaluators (state variables the
main program accumulates each step; ``reset``/``eval`` run small programs). EditDistance."""

from __future__ import annotations

import warnings

import numpy as np

from .. import layers
from ..ir import unique_name
from ..ir.default_programs import program_guard
from ..ir.program import Program
from ..layers.helper import LayerHelper
from ..runtime.scope import global_scope
from ._missing import missing

__all__ = ["EditDistance", "Evaluator"]


class Evaluator:
    """Base of the in-program evaluators: ``states`` (persistable, zero at startup and at
    ``reset``), ``metrics`` (the per-batch values to fetch), ``eval(executor)``."""

    def __init__(self, name, **kwargs):
        warnings.warn(f"fluid.evaluator.{type(self).__name__} is deprecated in Paddle 1.8; "
                      f"fluid.metrics.{type(self).__name__} computes it from fetched values",
                      DeprecationWarning, stacklevel=3)
        self.states, self.metrics = [], []
        self.helper = LayerHelper(name)

    def _create_state(self, suffix, dtype, shape):
        name = f"{unique_name.generate(self.helper.name)}_{suffix}"
        state = self.helper.main_program.global_block().create_var(
            name, list(shape), dtype, persistable=True, stop_gradient=True)
        startup = self.helper.startup_program.global_block()
        svar = startup.create_var(name, list(shape), dtype, persistable=True)
        startup.append_op("fill_constant", outputs={"Out": svar},
                          attrs={"shape": list(shape), "dtype": dtype, "value": 0.0})
        self.states.append(state)
        return state

    def _accumulate(self, state, value):
        layers.sums([state, value], out=state)

    def reset(self, executor, reset_program=None):
        """Zero every state in the executor's scope (``reset_program`` is accepted and not
        needed: the states are written directly)."""
        scope = global_scope()
        for state in self.states:
            scope[state.name] = np.zeros(state.shape, state.dtype)

    def eval(self, executor, eval_program=None):
        raise NotImplementedError("an Evaluator subclass implements eval(executor)")


class EditDistance(Evaluator):
    """Accumulates the edit distances between ``input`` and ``label`` sequences (the
    edit_distance layer, ``ignored_tokens`` dropped first); ``eval`` gives the average
    distance and the fraction of sequences with any error since the last ``reset``.
    ``metrics``: this batch's [total distance, count of sequences with an error]."""

    def __init__(self, input, label, ignored_tokens=None, **kwargs):
        super().__init__("edit_distance", **kwargs)
        self.total_distance = self._create_state("total_distance", "float32", [1])
        self.seq_num = self._create_state("seq_num", "int64", [1])
        self.instance_error = self._create_state("instance_error", "int64", [1])
        distances, seq_num = layers.edit_distance(input=input, label=label,
                                                  ignored_tokens=ignored_tokens)
        exact = layers.cast(layers.equal(distances, layers.fill_constant(
            [1], distances.dtype, 0.0)), "int64")
        errors = layers.elementwise_sub(seq_num, layers.reduce_sum(exact))
        total = layers.reduce_sum(distances)
        self._accumulate(self.total_distance, total)
        self._accumulate(self.seq_num, seq_num)
        self._accumulate(self.instance_error, errors)
        self.metrics += [total, errors]

    def eval(self, executor, eval_program=None):
        """(average distance, fraction of sequences with an error), each a [1] array."""
        program = eval_program if eval_program is not None else Program()
        with program_guard(program, Program()):
            block = program.global_block()
            held = [block.create_var(s.name, list(s.shape), s.dtype, persistable=True)
                    for s in (self.total_distance, self.seq_num, self.instance_error)]
            count = layers.cast(held[1], "float32")
            avg = layers.elementwise_div(held[0], count)
            error_rate = layers.elementwise_div(layers.cast(held[2], "float32"), count)
        got = executor.run(program, fetch_list=[avg, error_rate])
        return np.array(got[0]), np.array(got[1])


def __getattr__(name: str):
    raise missing(__name__, name)
