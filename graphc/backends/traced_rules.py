"""Rules traced once per signature while a step is traced: the ops of ``ONCE`` with equal
attributes and input types share one trace of their rule, inlined where each op stands."""

# A model holds many ops that trace alike: one optimizer update per parameter, mostly of a few
# shapes, a batch norm and its gradient per convolution of a stage, a matmul gradient per head.
# Tracing a rule costs JAX tens of microseconds per primitive it binds (a vjp-based gradient:
# milliseconds), so a step's first trace paid for every copy. Here the rule runs in a
# ``jax.jit(inline=True)`` made once per (op type, attributes, output types, input avals,
# whether data checks are collected): JAX traces it on first use, and later calls copy its
# equations into the step's jaxpr, the equations the rule's own trace would have bound, so the
# compiled step is the same (tests/test_traced_rules.py compares the StableHLO).
# Only inside a step's own trace (every input a tracer of the innermost staging trace), and
# only for the rules of ``ONCE``, which read nothing but their attributes and inputs (no random
# key, step counter, host service or stash); a rule that reports a data check runs as before
# (its report must reach the step's checks).

from __future__ import annotations

import threading
from collections import OrderedDict

import jax
from jax._src import core as _jax_core
from jax._src.interpreters import partial_eval as _pe

from .compiled_rules import _freeze, _Unfrozen
from .data_checks import checks_collected, collecting
from .lowering import apply_rule, no_forward_stash

__all__ = ["ONCE", "apply_traced_once"]

# Pure rules (their inputs and attributes are all they read), numerous in real models: the
# optimizer updates, batch norm, and the gradients of common layers (most are jax.vjp of the
# forward rule, backends/lowering.py's generic_grad, the costliest rules to trace)
ONCE = frozenset({
    "sgd", "momentum", "adam", "adamw", "batch_norm", "batch_norm_grad",
    "conv2d_grad", "depthwise_conv2d_grad", "pool2d_grad", "mul_grad", "matmul_grad",
    "matmul_v2_grad", "elementwise_add_grad", "elementwise_sub_grad", "elementwise_mul_grad",
    "elementwise_div_grad", "layer_norm_grad", "softmax_grad", "gelu_grad", "reshape2_grad",
    "transpose2_grad"})
_MAX = 2048


class _Reported(Exception):
    """The rule made a data-check report inside the shared trace (it then runs as before)."""


class _Traces:
    """The jitted rules by key, least recently used dropped beyond ``_MAX`` (thread safe)."""

    def __init__(self):
        self.entries: OrderedDict = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key):
        with self.lock:
            fn = self.entries.get(key)
            if fn is not None:
                self.entries.move_to_end(key)
            return fn

    def put(self, key, fn) -> None:
        with self.lock:
            self.entries[key] = fn
            while len(self.entries) > _MAX:
                self.entries.popitem(last=False)


# cache: one jitted rule per signature, for the process (what it holds are traces of pure
# rules, valid for every step; dropping one costs a trace)
_TRACES = _Traces()
_DIRECT = object()  # a key whose rule reports data checks: it is traced op by op


def _in_step_trace(ins: dict[str, list]) -> bool:
    """Every input is a tracer of the innermost trace, and that trace stages a jaxpr."""
    trace = _jax_core.trace_ctx.trace
    if not isinstance(trace, _pe.DynamicJaxprTrace):
        return False
    return all(isinstance(v, _pe.DynamicJaxprTracer) and v._trace is trace
               for vals in ins.values() for v in vals)


def _make(op_type, attrs, out_types, where, collect: bool):
    def run(ins):
        with no_forward_stash():
            if not collect:
                return apply_rule(op_type, attrs, ins, out_types, where)
            with collecting() as reports:
                outs = apply_rule(op_type, attrs, ins, out_types, where)
            if reports:
                raise _Reported
            return outs

    return jax.jit(run, inline=True)


def apply_traced_once(op_type: str, attrs, ins: dict[str, list], out_types: dict[str, list],
                      where: str) -> dict[str, list] | None:
    """``apply_rule``'s outputs from the op's shared trace, or None where the caller must
    call ``apply_rule`` itself (an op not in ONCE, not inside a step's trace, or whose
    attributes have no hashable form)."""
    if op_type not in ONCE or not _in_step_trace(ins):
        return None
    collect = checks_collected()
    try:
        key = (op_type, _freeze(attrs), tuple(sorted(
            (s, tuple(tuple(t) for t in ts)) for s, ts in out_types.items())),
            tuple(sorted((s, tuple((v.shape, str(v.dtype), v.weak_type) for v in vals))
                         for s, vals in ins.items())), collect)
        hash(key)
    except (_Unfrozen, TypeError):
        return None
    fn = _TRACES.get(key)
    if fn is _DIRECT:
        return None
    if fn is None:
        fn = _make(op_type, attrs, out_types, where, collect)
        _TRACES.put(key, fn)
    try:
        return fn(ins)
    except _Reported:
        _TRACES.put(key, _DIRECT)
        return None
