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
    # (lo, hi, allowed): ``bad`` is exactly ``outside(values, lo, hi, allowed)``, so a check
    # of a fed value can be made on the host before the step runs (runtime/host_checks.py)
    within: tuple | None = None


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


def checks_collected() -> bool:
    """Whether a rule's checks are collected now (a step traced with its data checks): a
    value a check finds bad then refuses the step, so nothing computed from it is seen
    (what lets a rule narrow checked ids to int32 with a plain conversion, narrow.py)."""
    return _SINK.get() is not None


def count_dtype(size: int):
    """The dtype of a count of, or a position among, ``size`` elements: int32 while it
    holds every one (the summaries' sums and argmax then have no s64 arithmetic), int64
    beyond."""
    return jnp.int32 if size <= np.iinfo(np.int32).max else jnp.int64


def outside(values, lo: int, hi: int, allowed: int | None = None):
    """Where ``values`` lie outside ``[lo, hi)`` and differ from ``allowed`` (None: none is):
    the range check of labels, ids and indices (numpy or jax arrays alike)."""
    bad = (values < lo) | (values >= hi)
    return bad if allowed is None else bad & (values != allowed)


def report_invalid(ctx, slot: str, bad, values, expected: str, *, own: bool = False,
                   within: tuple | None = None) -> None:
    """Refuse the run when any element of ``bad`` is true: ``values`` (same shape) is what
    the rule's input ``slot`` holds there, ``expected`` what the op accepts ("in [0, 10)").
    ``within=(lo, hi, allowed)`` instead of ``bad`` (pass None): the input as given must
    lie in ``[lo, hi)`` or equal ``allowed`` (see ``outside``); a fed input's check is then
    made on the host where the runtime can (runtime/host_checks.py).
    ``ctx`` is the rule's RuleContext. Eagerly this raises DataError now; inside
    ``collecting`` (a step being traced) it is collected for the step to return."""
    if within is not None:
        bad = outside(values, *within)
    where = ctx.where
    sink = _SINK.get()
    if sink is not None:
        sink.append(InvalidReport(ctx.op_type, where, slot, expected, bad, values, own=own,
                                  within=within))
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
        # count and position in int32 where they fit (the sums and argmax then run without
        # s64 arithmetic); only the bad value itself is read at its own width
        small = count_dtype(bad.size)
        first = jax.lax.argmax(bad, 0, small)
        value = jnp.reshape(r.values, (-1,))[first].astype(jnp.int64)
        rows.append(jnp.stack([jnp.sum(bad, dtype=small).astype(jnp.int64), value,
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


def refusal(culprit: str, site, value, index: list, count: int, where: str = "") -> DataError:
    """The DataError of a refused step: ``culprit`` holds ``value`` at ``index`` (of
    ``count`` bad values), which ``site`` (an InvalidReport) does not accept."""
    more = f" ({count} such values)" if count > 1 else ""
    return DataError(f"{culprit} holds {int(value)} at {index}{where}{more}: "
                     f"{site.where} expects {site.expected}. The step was "
                     "refused: nothing in the scope changed")


# Host checks: a range check of a fed numpy array made before the step is dispatched
# (CompiledStep's ``host_feeds``). Why: on XLA:CPU a small step's time is mostly its number
# of kernels and outputs; a check in the program costs reductions, a summary output read
# back after the call and a ``cond`` around the updates (10-15 us of a 90 us MLP step),
# where the fed array's smallest and largest values decide it on the host, and a bad value
# stops the run before anything is dispatched. A small array is compared as a Python list:
# in a training loop a numpy reduction cost 8-20 us there (measured beside the step's
# dispatch, though 1 us alone), ``tolist`` and ``min``/``max`` nothing measurable.
_AS_LIST = 512  # arrays up to this size are checked as Python lists
_UNSIGNED = {np.dtype(f"int{b}"): np.dtype(f"uint{b}") for b in (8, 16, 32, 64)}


class HostChecks:
    """Range checks of fed arrays: per check, (feed name, lo, hi, allowed, site), from a
    traced step's ``host_checks`` [(feed name, InvalidReport with ``within``)]."""

    __slots__ = ("checks",)

    def __init__(self, host_checks: list):
        self.checks = tuple((name, *site.within, site) for name, site in host_checks)

    def __call__(self, feeds: dict) -> None:
        """DataError, as the step would have raised it, for the first check a fed array
        ({name: array}) fails; nothing otherwise."""
        for name, lo, hi, allowed, site in self.checks:
            values = np.asarray(feeds[name])
            size = values.size
            if not size:
                continue
            if size <= _AS_LIST:
                flat = values.ravel().tolist()
                if lo <= min(flat) and max(flat) < hi:
                    continue
            elif lo == 0 and values.dtype in _UNSIGNED:  # as unsigned, one reduction
                if values.view(_UNSIGNED[values.dtype]).max() < hi:
                    continue
            elif values.min() >= lo and values.max() < hi:
                continue
            self._refuse(name, values, lo, hi, allowed, site)

    def for_sizes(self, sizes: dict):
        """``fn(feeds)``: this check for fed numpy arrays of known ``sizes`` ({name: size};
        a steady run's feeds, whose types and shapes were matched first), with the same
        verdicts: a list-sized array whose extremes fit passes, anything else takes
        ``__call__``. Why: one small function, for the steady run's few calls."""
        if len(self.checks) != 1:
            return self
        name, lo, hi, _, _ = self.checks[0]
        if not 0 < sizes[name] <= _AS_LIST:
            return self
        full = self

        def check(feeds):
            flat = feeds[name].ravel().tolist()
            if not (lo <= min(flat) and max(flat) < hi):
                full(feeds)

        return check

    @staticmethod
    def _refuse(name, values, lo, hi, allowed, site) -> None:
        """DataError for the first of ``values`` outside [lo, hi) and not ``allowed``."""
        bad = outside(values, lo, hi, allowed)
        if bad.any():
            flat = np.flatnonzero(bad)
            index = [int(k) for k in np.unravel_index(int(flat[0]), bad.shape)]
            raise refusal(f"feed '{name}'", site, values.flat[flat[0]], index, int(flat.size))
