"""Every registered op is complete (docs/adding_an_op.md): it has a lowering rule, or, for a
gradient op, a differentiable forward op whose rule the generic vjp gradient differentiates
(which needs every forward input: a ``grad_reads`` leaving one out needs a grad rule); and it
has a shape-inference case in tests/test_shape_inference.py.

The failure names each incomplete op and what it lacks. (Gradient checks are enforced by
tests/test_gradients.py's test_every_differentiable_op_has_a_case.)
"""

from __future__ import annotations

import pytest
from test_shape_inference import CASES as SHAPE_CASES

from graphc.backends.lowering import _RULES, generic_grad, get_rule, has_rule
from graphc.ir.grad_defs import DOUBLE_GRAD_OPS, forward_type, grad_op_type, register_grad_ops
from graphc.ir.opdef import _REGISTRY, NO_GRAD, all_op_types, get_op_def, register
from graphc.ops import import_lowerings

SHAPE_TESTS = "tests/test_shape_inference.py"


def _shape_covered() -> set[str]:
    """Op types with a shape-inference case: those named in CASES, and the derived
    ``T_grad`` of each (test_grad_op_types checks it from T's case)."""
    named = {p.values[0] for p in SHAPE_CASES}
    # T_grad_grad of a double-grad T: test_stoppers24_double_grad_op_types checks it
    double = {grad_op_type(grad_op_type(t)) for t in named & DOUBLE_GRAD_OPS}
    return named | {grad_op_type(t) for t in named} | double


def incomplete(op_types) -> dict[str, list[str]]:
    """op type -> what it lacks, for each incomplete op among ``op_types``."""
    import_lowerings()
    covered = _shape_covered()
    out: dict[str, list[str]] = {}
    for t in op_types:
        lacks = []
        if not has_rule(t):  # has_rule: a grad op's own rule, or its forward's (generic vjp)
            lacks.append(f"a lowering rule, or a differentiable forward op {t[:-5]!r} with "
                         "one for the generic vjp gradient" if t.endswith("_grad") else
                         "a lowering rule (its family's lowering.py)")
        elif forward_type(t) and get_rule(t) is generic_grad:
            fwd = get_op_def(forward_type(t))
            unread = [s for s in fwd.input_names if s not in fwd.grad_read_slots]
            if unread:  # the generic vjp differentiates the forward rule at its inputs
                lacks.append(f"a grad rule of its own: grad_reads leaves out {unread}, which "
                             "the generic vjp gradient needs")
        if t not in covered:
            lacks.append(f"a shape-inference case in {SHAPE_TESTS}")
        if lacks:
            out[t] = lacks
    return out


def _describe(missing: dict[str, list[str]]) -> str:
    return "\n".join(f"  {t}: needs {' and '.join(lacks)}" for t, lacks in sorted(missing.items()))


def test_every_registered_op_is_complete():
    missing = incomplete(all_op_types())
    assert not missing, ("ops registered without everything an op needs "
                         "(docs/adding_an_op.md):\n" + _describe(missing))


@pytest.fixture
def probe_op():
    """A newly registered op with nothing else: no rule, no case (removed afterwards)."""
    name = "completeness_probe"
    register(name, "X", "Out", infer=lambda c: {"Out": c.x("X")}, traits=(NO_GRAD,))
    try:
        yield name
    finally:
        del _REGISTRY[name]


def test_a_new_op_without_rule_or_case_is_named(probe_op):
    missing = incomplete([probe_op])
    assert list(missing) == [probe_op]
    text = _describe(missing)
    assert "lowering rule" in text and "shape-inference case" in text, text


def test_a_grad_op_reading_too_little_for_the_generic_gradient_is_named():
    """grad_reads=("Out",) (Paddle's relu_grad) needs a hand-written rule: the generic vjp
    differentiates the forward rule at X, which the grad op is not given."""
    name = "completeness_probe_act"
    register(name, "X", "Out", infer=lambda c: {"Out": c.x("X")}, grad_reads=("Out",),
             grad_type_from={"X": "Out"})
    register_grad_ops()
    _RULES[name] = lambda c, X: {"Out": X}  # a forward rule: the generic vjp would apply
    try:
        assert "grad rule of its own" in _describe(incomplete([name + "_grad"]))
    finally:
        del _REGISTRY[name], _REGISTRY[name + "_grad"], _RULES[name]


def test_a_grad_op_without_a_differentiable_forward_is_named():
    """A hand-registered grad op of a forward op that has a rule is covered by the generic
    vjp; one whose forward op does not exist is not."""
    assert "relu_grad" not in incomplete(["relu_grad"])
    name = "no_such_forward_grad"
    register(name, "X", "Out", infer=lambda c: {"Out": c.x("X")})
    try:
        assert "differentiable forward op" in _describe(incomplete([name]))
    finally:
        del _REGISTRY[name]
