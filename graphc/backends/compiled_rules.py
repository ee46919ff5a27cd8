"""The interpreter's compiled rules: each op's lowering rule run as one XLA executable per
(op type, attrs, output types, input avals), cached in a bounded RuleCache the interpreter owns.
"""

# Evaluated primitive by primitive, a rule costs one XLA compile per distinct primitive call it
# makes (hundreds for a detection loss); compiled whole it costs one, and its later runs are one
# dispatch. The interpreter still walks the graph op by op (each op its own executable, its
# outputs checked against the IR before the next op runs), so it stays an independent check of
# the emitter's whole-program step. A rule runs eagerly, as before, wherever compiling it could
# change what it does (``RuleCache.apply`` returns None; ``_eager_reason`` says why).

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from contextvars import ContextVar

import jax
import numpy as np

from ..ir.opdef import COLLECTIVE, HOST_CALLBACK, get_op_def
from .data_checks import collecting, report_invalid
from .lowering import apply_rule, no_forward_stash
from .precision import graphc_products

_EAGER = object()  # a cache entry: this key's rule does not compile (it runs eagerly)


class _Unfrozen(Exception):
    """An attribute value with no stable hashable form (the op runs eagerly)."""


def _freeze(value):
    """A hashable key for an attribute value; types are kept (1, 1.0 and True differ)."""
    if value is None or isinstance(value, bool | int | str):
        return (type(value).__name__, value)
    if isinstance(value, float):
        return ("float", value.hex())  # NaN equals itself as a key
    if isinstance(value, list | tuple):
        return (type(value).__name__, tuple(_freeze(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((str(k), _freeze(v)) for k, v in value.items())))
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return ("dtype", str(np.dtype(value)))
    if isinstance(value, np.generic):
        return ("np", str(value.dtype), _freeze(value.item()))
    if isinstance(value, np.ndarray) and value.size <= 4096:
        return ("ndarray", str(value.dtype), value.shape, value.tobytes())
    raise _Unfrozen(type(value).__name__)


def _eager_reason(op_type: str, seed_key, step) -> str | None:
    """Why this op must run eagerly, or None when its rule may be compiled."""
    opdef = get_op_def(op_type)
    if opdef.regions:  # its rule walks a body graph op by op (a Python loop over concrete
        return "regions"  # trip counts and branches), and each body op is compiled itself
    if opdef.has_trait(HOST_CALLBACK):  # Print and py_func run Python as the walk reaches
        return "host callback"  # them, once per run, in program order
    if opdef.has_trait(COLLECTIVE):  # their reference meaning reads the replica set up
        return "collective"
    if not (isinstance(seed_key, int) and isinstance(step, int)):
        return "traced step"  # a loop body's counter: the rule already runs inside a trace
    return None


class RuleCache:
    """Compiled rules by key, least recently used dropped beyond ``maxsize`` entries.

    Thread safe (the interpreter's op threads share one). ``stats`` counts hits, compiles
    and eager runs, for tests and profiling."""

    def __init__(self, maxsize: int = 4096):
        self.maxsize = maxsize
        self._entries: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self.stats = {"hits": 0, "compiles": 0, "eager": 0}

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def _get(self, key):
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
            return entry

    def _put(self, key, entry) -> None:
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)

    def _count(self, what: str) -> None:
        with self._lock:
            self.stats[what] += 1

    def apply(self, op_type: str, attrs, ins: dict[str, list], out_types: dict[str, list],
              where: str, seed_key=0, step=0, replicas=None) -> dict[str, list] | None:
        """``apply_rule``'s result computed by the op's compiled rule; None when the op must
        run eagerly (the caller then calls ``apply_rule`` itself)."""
        # LoD values, row-sparse values and tensor arrays are pytrees of arrays: their
        # structure (levels, a tensor array's element type) is part of the key with the avals
        leaves, tree = jax.tree_util.tree_flatten(ins)
        if _eager_reason(op_type, seed_key, step) is not None or not all(
                isinstance(v, jax.Array) and not isinstance(v, jax.core.Tracer)
                for v in leaves):  # a tracer: inside someone's trace already
            self._count("eager")
            return None
        try:
            key = (op_type, _freeze(attrs), tuple(sorted(
                (s, tuple(tuple(t) for t in ts)) for s, ts in out_types.items())),
                tree, tuple((v.shape, str(v.dtype), v.weak_type) for v in leaves),
                None if replicas is None else (replicas.nranks, replicas.local, replicas.index))
            hash(key)
        except (_Unfrozen, TypeError):  # an attribute such as a Python callable
            self._count("eager")
            return None
        entry = self._get(key)
        args = (np.int64(seed_key), np.int64(step), ins)
        if entry is None:
            entry = _compile(op_type, attrs, out_types, where, replicas, args)
            self._put(key, entry)
            self._count("compiles")
        else:
            self._count("hits")
        if entry is _EAGER:
            return None
        compiled, checks = entry
        outs, checked = compiled(*args)
        # the data checks the rule made while traced, made again on their concrete values:
        # the first offending one raises DataError as the eager rule would have
        ctx = _Where(op_type, where)
        for (slot, expected, own), (bad, values) in zip(checks, checked):
            report_invalid(ctx, slot, bad, values, expected, own=own)
        return outs


class _Where:
    """What ``report_invalid`` reads of a RuleContext: the op it names."""

    __slots__ = ("op_type", "where")

    def __init__(self, op_type: str, where: str):
        self.op_type, self.where = op_type, where


def _compile(op_type, attrs, out_types, where, replicas, args):
    """(compiled executable, data-check metadata), or _EAGER when the rule cannot be
    compiled as it stands: it reads an input's value on the host (a shape tensor, a bound),
    branches on one, or has effects (ordered callbacks must run as the walk reaches them)."""
    checks: list = []

    def run(seed_key, step, ins):
        with collecting() as reports, no_forward_stash(), graphc_products():
            outs = apply_rule(op_type, attrs, ins, out_types, where, seed_key, step, replicas)
        checks[:] = [(r.slot, r.expected, r.own) for r in reports]  # one trace per entry
        return outs, [(r.bad, r.values) for r in reports]

    try:
        traced = jax.jit(run).trace(*args)
        if traced.jaxpr.effects:
            return _EAGER
        return traced.lower().compile(), tuple(checks)
    except Exception:  # noqa: BLE001 - the eager path runs the rule again and raises the
        return _EAGER  # rule's own error, if it has one, naming the op


# -- the cache in effect ---------------------------------------------------------------------
_IN_EFFECT: ContextVar[RuleCache | None] = ContextVar("graphc_rule_cache", default=None)


@contextlib.contextmanager
def rule_cache_in_effect(cache: RuleCache | None):
    """Ops evaluated in the block (nested bodies included) use ``cache``; None: eager."""
    token = _IN_EFFECT.set(cache)
    try:
        yield cache
    finally:
        _IN_EFFECT.reset(token)


def current_rule_cache() -> RuleCache | None:
    return _IN_EFFECT.get()
