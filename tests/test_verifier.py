"""The verifier rejects each class of corrupted graph with a VerifyError that names the op
at fault and the source line that built it; valid random graphs verify."""

from __future__ import annotations

import os
import sys

import networkx as nx
import pytest
from hypothesis import given
from hypothesis import strategies as st

import graphc
from graphc import TensorType, layers
from graphc.ir import VarInfo
from graphc.testing import random_graphs

THIS_FILE = os.path.basename(__file__)


def here() -> int:
    """The caller's line number (ops built on that line record it as their source)."""
    return sys._getframe(1).f_lineno


def build():
    """x -> relu -> scale -> tanh, plus dropout(x); returns the graph and each op's line."""
    x = graphc.data("x", [-1, 4])
    relu_line, h = here(), layers.relu(x)
    scale_line, s = here(), layers.scale(h, 2.0)
    tanh_line, _ = here(), layers.tanh(s)
    dropout_line, _ = here(), layers.dropout(x, 0.5)
    g = graphc.lower(graphc.default_main_program())
    g.verify()
    ops = {op.type: op for op in g.ops()}
    lines = {"relu": relu_line, "scale": scale_line, "tanh": tanh_line, "dropout": dropout_line}
    return g, ops, lines


def reject(g: graphc.Graph, *fragments: str) -> graphc.VerifyError:
    with pytest.raises(graphc.VerifyError) as err:
        g.verify()
    message = str(err.value)
    for fragment in fragments:
        assert fragment in message, message
    return err.value


def at(line: int) -> str:
    return f"{THIS_FILE}:{line}"


def test_valid_graph_verifies_and_ops_record_this_file():
    g, ops, lines = build()
    for op_type, line in lines.items():
        assert ops[op_type].source.endswith(at(line))
        assert os.path.basename(ops[op_type].source.rpartition(":")[0]) == THIS_FILE


# ---------------------------------------------------------------------- dangling uses


def test_dangling_use_of_a_removed_input():
    g, ops, lines = build()
    g.inputs.remove(g.value("x"))
    err = reject(g, "reads %x", "dangling use")
    assert err.op in (ops["relu"], ops["dropout"])
    assert at(lines[err.op.type]) in str(err) and err.op.where in str(err)


def test_dangling_use_after_the_producer_is_removed():
    g, ops, lines = build()
    g.nx.remove_node(ops["scale"])
    del g.ops_by_id[ops["scale"].id]
    g._touch(ops["tanh"])
    err = reject(g, "op tanh at ", at(lines["tanh"]), "reads %scale_0.tmp_0", "dangling")
    assert err.op is ops["tanh"]


# ----------------------------------------------------------------------- double definition


def test_value_defined_twice():
    g, ops, lines = build()
    g.nx.add_edge(ops["tanh"], ops["scale"].output("Out"), key=("Out", 1))
    g._touch(ops["tanh"])
    reject(g, "%scale_0.tmp_0 is defined more than once", "op scale at ", at(lines["scale"]),
           "op tanh at ", at(lines["tanh"]))


def test_graph_input_also_defined_by_an_op():
    g, ops, lines = build()
    g.nx.add_edge(ops["relu"], g.value("x"), key=("Out", 1))
    g._touch(ops["relu"])
    err = reject(g, "%x is a graph input and is also defined by an op", "op relu at ",
                 at(lines["relu"]))
    assert err.op is ops["relu"]


# ------------------------------------------------------------------------------- cycles


def test_cycle():
    g, ops, lines = build()
    relu, tanh = ops["relu"], ops["tanh"]
    g.nx.remove_edge(g.value("x"), relu, key=("X", 0))
    g.nx.add_edge(tanh.output("Out"), relu, key=("X", 0))
    g._touch(relu)
    reject(g, "cycle through 3 ops", "first op relu at ", at(lines["relu"]))


def test_self_loop_through_a_value():
    g, ops, lines = build()
    scale = ops["scale"]
    g.nx.remove_edge(ops["relu"].output("Out"), scale, key=("X", 0))
    g.nx.add_edge(scale.output("Out"), scale, key=("X", 0))
    g._touch(scale)
    reject(g, "cycle", "op scale at ", at(lines["scale"]))


# ------------------------------------------------------------------------ bad attributes


@pytest.mark.parametrize("op_type, attr, value, message", [
    ("scale", "scale", "two", "attribute 'scale' expects float, got str 'two'"),
    ("scale", "bias_after_scale", 1, "attribute 'bias_after_scale' expects bool"),
    ("dropout", "seed", 1.5, "attribute 'seed' expects int"),
    ("dropout", "seed", True, "attribute 'seed' expects int"),
    ("dropout", "dropout_implementation", 3, "attribute 'dropout_implementation' expects str"),
    ("relu", "alpha", 0.1, "unknown attribute 'alpha' for op relu"),
    ("scale", "scale", 2, "attributes are not normalized"),  # an int where a float belongs
])
def test_bad_attribute(op_type, attr, value, message):
    g, ops, lines = build()
    ops[op_type].attrs[attr] = value
    err = reject(g, f"op {op_type} at ", at(lines[op_type]), message)
    assert err.op is ops[op_type]


def test_missing_attribute():
    g, ops, lines = build()
    del ops["scale"].attrs["bias"]
    reject(g, "op scale at ", at(lines["scale"]), "not normalized (missing ['bias'])")


def test_attribute_value_the_op_cannot_infer_with():
    g, ops, lines = build()
    ops["dropout"].attrs["dropout_prob"] = 1.5
    reject(g, "op dropout at ", at(lines["dropout"]), "dropout_prob 1.5 not in [0, 1]")


# ------------------------------------------------------------------------ shape mismatch


def test_output_shape_changed():
    g, ops, lines = build()
    out = ops["scale"].output("Out")
    out.type = TensorType((-1, 5), "float32")
    err = reject(g, "op scale at ", at(lines["scale"]), "%scale_0.tmp_0 is declared f32[-1,5]",
                 "produces f32[-1,4]", "shape mismatch")
    assert err.op is ops["scale"]


def test_output_dtype_changed():
    g, ops, lines = build()
    ops["tanh"].output("Out").type = TensorType((-1, 4), "float64")
    reject(g, "op tanh at ", at(lines["tanh"]), "declared f64[-1,4]")


def test_input_shape_changed_blames_the_first_reader():
    g, ops, lines = build()
    g.value("x").type = TensorType((-1, 4, 1), "float32")
    err = reject(g, "shape mismatch")
    # relu and dropout both read x; the verifier reports the first in program order
    assert err.op is ops["relu"] and at(lines["relu"]) in str(err)


# ------------------------------------------------------------------------- slot problems


def test_missing_required_input_slot():
    g, ops, lines = build()
    g.nx.remove_edge(ops["relu"].output("Out"), ops["scale"], key=("X", 0))
    g._touch(ops["scale"])
    err = reject(g, "op scale at ", at(lines["scale"]), "missing required input slot 'X'")
    assert err.op is ops["scale"]


def test_missing_required_output_slot():
    g, ops, lines = build()
    mask = ops["dropout"].output("Mask")
    g.nx.remove_node(mask)
    del g.values[mask.name]
    g._touch(ops["dropout"])
    reject(g, "op dropout at ", at(lines["dropout"]), "missing required output slot 'Mask'")


def test_unknown_slot():
    g, ops, lines = build()
    g.nx.add_edge(g.value("x"), ops["tanh"], key=("Bias", 0))
    g._touch(ops["tanh"])
    reject(g, "op tanh at ", at(lines["tanh"]), "no input slot 'Bias'")


def test_two_values_in_a_single_value_slot():
    g, ops, lines = build()
    g.nx.add_edge(g.value("x"), ops["tanh"], key=("X", 1))
    g._touch(ops["tanh"])
    reject(g, "op tanh at ", at(lines["tanh"]), "takes one value, got 2")


def test_slot_positions_with_a_gap():
    g, ops, lines = build()
    out = ops["relu"].output("Out")
    g.nx.remove_edge(out, ops["scale"], key=("X", 0))
    g.nx.add_edge(out, ops["scale"], key=("X", 1))
    g._touch(ops["scale"])
    reject(g, "op scale at ", at(lines["scale"]), "positions [1], expected 0..0")


# ---------------------------------------------------------------------- op-level problems


def test_unknown_op_type():
    g, ops, lines = build()
    ops["relu"].type = "relu_v9"
    g._touch(ops["relu"])
    err = reject(g, "op relu_v9 at ", at(lines["relu"]), "unknown op type 'relu_v9'")
    assert err.op is ops["relu"]


def test_bad_op_role():
    g, ops, lines = build()
    ops["tanh"].role = "sideways"
    reject(g, "op tanh at ", at(lines["tanh"]), "op_role 'sideways'")


def test_error_shows_the_op_in_context():
    g, ops, lines = build()
    ops["scale"].attrs["bias"] = "x"
    err = reject(g)
    marked = [line for line in err.context.splitlines() if line.startswith("  > ")]
    assert len(marked) == 1 and "= scale(X=%relu_0.tmp_0)" in marked[0]
    assert f'{THIS_FILE}":{lines["scale"]})' in marked[0]  # loc("path":line)
    assert "= relu(" in err.context and "= tanh(" in err.context


def test_value_table_and_nodes_must_agree():
    g, _, _ = build()
    g.nx.add_node(graphc.ir.Value(g, "ghost", VarInfo("ghost"), 0, TensorType((1,), "float32")))
    reject(g, "value table and graph nodes disagree")


# --------------------------------------------------------------- corrupting random graphs
# Each corruption picks its target op from a drawn valid graph, breaks it and returns the
# op the verifier must blame (None if the graph offered nothing to break this way).


def _unknown_attr(data, g, op):
    op.attrs["no_such_attribute"] = 1
    return op, "unknown attribute 'no_such_attribute'"


_WRONG = {"int": "seven", "float": "x", "bool": 0, "str": 3, "dtype": "float7",
          "ints": "x", "floats": [None], "strs": [1]}


def _wrong_attr_type(data, g, op):
    attrs = sorted(op.attrs)
    if not attrs:
        return None
    name = data.draw(st.sampled_from(attrs))
    op.attrs[name] = _WRONG[op.opdef.attrs[name].type]
    return op, f"attribute '{name}' expects"


def _output_shape(data, g, op):
    v = data.draw(st.sampled_from(op.output_values()))
    v.type = TensorType(v.type.shape + (2,), v.type.dtype)
    return op, "shape mismatch"


def _missing_input(data, g, op):
    required = [s.name for s in op.opdef.inputs if not s.optional and op.inputs.get(s.name)]
    if not required:
        return None
    slot = data.draw(st.sampled_from(required))
    for v in dict.fromkeys(op.inputs[slot]):  # sum(X=[%a, %a]) lists a value twice
        for key in [k for k in g.nx[v][op] if k[0] == slot]:
            g.nx.remove_edge(v, op, key=key)
    g._touch(op)
    return op, f"missing required input slot '{slot}'"


def _unknown_type(data, g, op):
    op.type = "no_such_op"
    g._touch(op)
    return op, "unknown op type 'no_such_op'"


def _dangling(data, g, op):
    uses = [(slot, pos) for slot, vs in op.inputs.items() for pos in range(len(vs))]
    if not uses:
        return None
    slot, pos = data.draw(st.sampled_from(uses))
    old = op.inputs[slot][pos]
    ghost = g._new_value(g._new_var(VarInfo("ghost")), 0, old.type)
    g.nx.remove_edge(old, op, key=(slot, pos))
    g.nx.add_edge(ghost, op, key=(slot, pos))
    g._touch(op)
    return op, "dangling use"


def _double_definition(data, g, op):
    others = [o for o in g.ops() if o is not op]
    if not others:
        return None
    other = data.draw(st.sampled_from(others))
    v = data.draw(st.sampled_from(op.output_values()))
    g.nx.add_edge(other, v, key=("Out", 99))
    g._touch(other)
    return other, f"%{v.name} is defined more than once"


def _cycle(data, g, op):
    uses = [(slot, pos) for slot, vs in op.inputs.items() for pos in range(len(vs))]
    if not uses:
        return None
    # feed one of op's inputs from op itself or from anything computed from op
    later = [v for v in nx.descendants(g.nx, op) if isinstance(v, graphc.ir.Value)]
    slot, pos = data.draw(st.sampled_from(uses))
    v = data.draw(st.sampled_from(sorted(later, key=lambda v: v.name)))
    g.nx.remove_edge(op.inputs[slot][pos], op, key=(slot, pos))
    g.nx.add_edge(v, op, key=(slot, pos))
    g._touch(op)
    return op, "cycle"


CORRUPTIONS = {f.__name__.lstrip("_"): f for f in (
    _unknown_attr, _wrong_attr_type, _output_shape, _missing_input, _unknown_type,
    _dangling, _double_definition, _cycle)}


@given(random_graphs(max_ops=6))
def test_random_graphs_verify(g):
    g.verify()
    assert graphc.verify(g) is None
    assert all(op.source for op in g.ops())  # the verifier's messages need them


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
@given(g=random_graphs(max_ops=5), data=st.data())
def test_corrupted_random_graph_names_the_op(kind, g, data):
    op = data.draw(st.sampled_from(g.ops()))
    result = CORRUPTIONS[kind](data, g, op)
    if result is None:  # this op offers nothing to break this way; still valid
        g.verify()
        return
    blamed, message = result
    err = reject(g, message, blamed.where)
    assert blamed.source and blamed.source.rpartition(":")[2].isdigit()
    assert blamed.source in str(err)
    assert err.op is blamed
