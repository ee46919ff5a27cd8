"""Comparison and logical layers of Fluid 1.8 (equal, less_than, ..., logical_and/or/xor/not):
bool outputs with no gradient; ``cond``/``out`` name a variable to write, as in Paddle."""

from __future__ import annotations

from .helper import LayerHelper, check_variable


def _bool_op(op_type: str, inputs: dict, out, attrs=None):
    for arg, var in inputs.items():
        check_variable(op_type, arg.lower(), var)
    helper = LayerHelper(op_type)
    out = out if out is not None else helper.create_variable_for_type_inference(
        "bool", stop_gradient=True)
    helper.append_op(op_type, inputs, {"Out": out}, attrs or {})
    return out


def _compare(op_type, x, y, cond, force_cpu=None):
    return _bool_op(op_type, {"X": x, "Y": y}, cond, {"force_cpu": bool(force_cpu)})


def equal(x, y, cond=None):
    return _compare("equal", x, y, cond)


def not_equal(x, y, cond=None):
    return _compare("not_equal", x, y, cond)


def less_than(x, y, force_cpu=None, cond=None):
    return _compare("less_than", x, y, cond, force_cpu)


def less_equal(x, y, cond=None):
    return _compare("less_equal", x, y, cond)


def greater_than(x, y, cond=None):
    return _compare("greater_than", x, y, cond)


def greater_equal(x, y, cond=None):
    return _compare("greater_equal", x, y, cond)


def logical_and(x, y, out=None, name=None):
    return _bool_op("logical_and", {"X": x, "Y": y}, out)


def logical_or(x, y, out=None, name=None):
    return _bool_op("logical_or", {"X": x, "Y": y}, out)


def logical_xor(x, y, out=None, name=None):
    return _bool_op("logical_xor", {"X": x, "Y": y}, out)


def logical_not(x, out=None, name=None):
    return _bool_op("logical_not", {"X": x}, out)
