"""Data checks: how a lowering rule refuses values it cannot learn from (a label outside
[0, classes), an id outside an embedding table) eagerly, and as outputs of a compiled step.

A rule calls ``report_invalid(ctx, slot, bad, values, expected)`` with its RuleContext.
Run eagerly (the interpreter) the report raises DataError at once. While a compiled step
is traced inside ``collecting()`` the report is collected instead: the step turns every
collected report into a few numbers it returns (``summarise``), keeps its old state when
one is bad, and the runtime reads them before it commits anything (backends.jax.step).
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from ..ir.errors import GraphcError


class DataError(GraphcError):
    """A value an op reads is outside what the op accepts: a hard label outside
    ``[0, classes)`` (and not its ``ignore_index``), an embedding id outside the table (and
    not its ``padding_idx``). Names the variable (the feed, when it was fed), the op and its
    source line, and one offending value. The step that met it did not commit: parameters,
    optimizer state and step counters in the scope are as they were before the run."""


@dataclass
class InvalidReport:
    """One check a rule made while a step was traced: ``bad`` marks offending elements of
    ``values`` (the input in ``slot``); ``expected`` says what was allowed."""

    op_type: str
    where: str
    slot: str
    expected: str
    bad: object
    values: object
    op: object = None  # the graph op that made it, set by whoever collects
    # a grad op's check of its own (a loop's bound), not a re-read of its forward op's input
    own: bool = False


_SINK: ContextVar[list | None] = ContextVar("graphc_invalid_reports", default=None)


@contextmanager
def collecting():
    """Collect the reports rules make inside the block (while tracing a step) in a list."""
    reports: list[InvalidReport] = []
    token = _SINK.set(reports)
    try:
        yield reports
    finally:
        _SINK.reset(token)


def report_invalid(ctx, slot: str, bad, values, expected: str, *, own: bool = False) -> None:
    """Refuse the run when any element of ``bad`` is true: ``values`` (same shape) is what
    the rule's input ``slot`` holds there, ``expected`` what the op accepts ("in [0, 10)").
    ``ctx`` is the rule's RuleContext. Eagerly this raises DataError now; inside
    ``collecting`` (a step being traced) it is collected for the step to return."""
    where = ctx.where
    sink = _SINK.get()
    if sink is not None:
        sink.append(InvalidReport(ctx.op_type, where, slot, expected, bad, values, own=own))
        return
    if isinstance(bad, jax.core.Tracer):
        return  # traced with no collector: a step built with its data checks switched off
    bad = np.asarray(bad)
    if bad.any():
        values = np.asarray(values)
        index = np.unravel_index(int(np.flatnonzero(bad)[0]), bad.shape)
        raise DataError(f"{where}: input {slot} holds {values[index]} at "
                        f"{list(map(int, index))}; expected {expected}. Nothing was "
                        "committed")


class InnerChecks:
    """Checks made inside a loop or branch body traced by ``lax.while_loop``/``cond``/
    ``scan``: their values cannot leave that trace, so the body carries a summary
    (``summarise``'s ``[n, 4]``) out and ``report`` hands it to the step's collector.

    ``initial(fn, args)`` traces ``fn`` abstractly once to learn which checks it makes
    (None: it makes none, so ``fn`` needs no wrapping); ``checked(fn)`` -> ``fn'(args) ->
    (fn(args), summary)``; ``merge`` folds one summary into the running one. ``keep``
    selects the checks that count (a loop's gradient keeps only its loops' own bounds)."""

    def __init__(self, keep=None):
        self.meta: list[tuple] = []
        self.keep = keep or (lambda report: True)

    def initial(self, fn, args):
        def probe(a):
            with collecting() as reports:
                fn(a)
            self.meta = [(r.op_type, r.where, r.slot, r.expected, r.own)
                         for r in reports if self.keep(r)]
            return 0
        jax.eval_shape(probe, args)
        return self.zeros() if self.meta else None

    def zeros(self):
        return jnp.zeros((len(self.meta), 4), jnp.int64)

    def checked(self, fn):
        def run(args):
            with collecting() as reports:
                out = fn(args)
            return out, summarise([r for r in reports if self.keep(r)])
        return run

    @staticmethod
    def merge(acc, new):
        first = acc[:, COUNT] > 0
        merged = jnp.where(first[:, None], acc, new)
        return merged.at[:, COUNT].set(acc[:, COUNT] + new[:, COUNT])

    def wrap(self, fn):
        run = self.checked(fn)

        def wrapped(args, acc):
            out, new = run(args)
            return out, self.merge(acc, new)
        return wrapped

    def report(self, acc) -> None:
        sink = _SINK.get()
        if acc is None:
            return
        if sink is None:  # eager (the interpreter): refuse now, as report_invalid does
            if isinstance(acc, jax.core.Tracer):
                return
            for i, (_, where, slot, expected, _) in enumerate(self.meta):
                if int(acc[i, COUNT]):
                    raise DataError(f"{where}: input {slot} holds {int(acc[i, VALUE])}; "
                                    f"expected {expected}. Nothing was committed")
            return
        for i, (op_type, where, slot, expected, own) in enumerate(self.meta):
            sink.append(InvalidReport(op_type, where, slot, expected, acc[i, COUNT] > 0,
                                      acc[i, VALUE], own=own))


@contextmanager
def ignored():
    """Checks made inside the block are dropped: a gradient recomputing a forward that the
    step already checked (a loop's body replayed by its gradient) reports nothing twice."""
    token = _SINK.set([])
    try:
        yield
    finally:
        _SINK.reset(token)


def refused_so_far():
    """While a step is traced: a traced bool, true when a check collected so far found a bad
    element, so an op with effects beyond the step (a parameter-server send) can do nothing
    for a step that will not commit; None outside ``collecting`` or before any check."""
    sink = _SINK.get()
    flags = [jnp.any(r.bad) for r in sink or () if np.size(r.bad)]
    return jnp.any(jnp.stack(flags)) if flags else None


# What ``summarise`` returns per report: how many elements are bad, the first bad one's
# value and flat position, and (for several iterations per call) the iteration it was in.
COUNT, VALUE, POSITION, ITERATION = range(4)


def summarise(reports: list[InvalidReport], replicas=None):
    """The reports as one int64 array ``[len(reports), 4]`` (see COUNT...ITERATION).

    Under data parallelism (``replicas`` with named axes) one small all_gather gives every
    replica every replica's summary: the counts are summed and the first bad value is the
    lowest replica's, its position counted in the global batch (replica r's block follows
    replica r-1's), so every replica returns the same array and takes the same branch."""
    rows = []
    for r in reports:
        bad = jnp.reshape(r.bad, (-1,))
        if bad.size == 0:
            rows.append(jnp.zeros((4,), jnp.int64))
            continue
        first = jnp.argmax(bad)
        value = jnp.reshape(r.values, (-1,))[first].astype(jnp.int64)
        rows.append(jnp.stack([jnp.sum(bad, dtype=jnp.int64), value,
                               first.astype(jnp.int64), jnp.zeros((), jnp.int64)]))
    if not rows:
        return jnp.zeros((0, 4), jnp.int64)
    out = jnp.stack(rows)
    if replicas is None or replicas.index is not None:
        return out
    every = jax.lax.all_gather(out, replicas.axes())  # [nranks, reports, 4], replica order
    counts = every[:, :, COUNT]
    first_replica = jnp.argmax(counts > 0, axis=0)
    picked = jnp.take_along_axis(every, first_replica[None, :, None], axis=0)[0]
    sizes = jnp.asarray([max(int(np.prod(np.shape(r.bad))), 1) for r in reports], jnp.int64)
    picked = picked.at[:, POSITION].add(first_replica.astype(jnp.int64) * sizes)
    return picked.at[:, COUNT].set(jnp.sum(counts, axis=0))


def ok(summary) -> jax.Array:
    """True when no report found a bad element (a scalar, for selecting the new state)."""
    return jnp.all(summary[..., COUNT] == 0)


def over_iterations(summaries):
    """``[K, n, 4]`` summaries of K iterations as one ``[n, 4]``: total counts, the first
    bad iteration's value and position, and that iteration's number."""
    counts = summaries[:, :, COUNT]
    k = jnp.argmax(counts > 0, axis=0)  # first iteration with a bad element, per report
    first = jnp.take_along_axis(summaries, k[None, :, None], axis=0)[0]
    first = first.at[:, ITERATION].set(k.astype(jnp.int64))
    return first.at[:, COUNT].set(jnp.sum(counts, axis=0))
