"""The Rewriter: inserting ops with inferred types, provenance, events, replacing uses,
erasing, rewiring, and realistic rewrites that keep the graph valid and its text stable."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

import graphc
from graphc import TensorType, layers
from graphc.ir import OpDefinitionError, ProgramError, ShapeError, UnknownOpError
from graphc.testing import random_graphs


def lowered() -> graphc.Graph:
    g = graphc.lower(graphc.default_main_program())
    g.verify()
    return g


def chain():
    """x -> relu -> tanh, and sigmoid(x); elementwise_add(sigmoid, tanh)."""
    x = graphc.data("x", [-1, 3])
    a = layers.relu(x)
    b = layers.sigmoid(x)
    c = layers.tanh(a)
    layers.elementwise_add(b, c)
    g = lowered()
    return g, {op.type: op for op in g.ops()}


def rename(text: str, old: str, new: str) -> str:
    return re.sub(re.escape(f"%{old}") + r"(?=[\s,:)\]]|$)", f"%{new}", text)


# ------------------------------------------------------------------------------ create_op


def test_create_op_infers_output_types():
    graphc.data("x", [-1, 4])
    graphc.data("y", [3, 4])
    g = lowered()
    rw = g.rewriter("test")
    op = rw.create_op("matmul", {"X": g.value("x"), "Y": g.value("y")}, {"Out": "prod"},
                      {"transpose_Y": True})
    out = op.output("Out")
    assert out.name == "prod" and out.type == TensorType((-1, 3), "float32")
    assert out.var.kind == "temp" and out.producer is op
    assert op.attrs == {"transpose_X": False, "transpose_Y": True, "alpha": 1.0}
    assert op.inputs == {"X": [g.value("x")], "Y": [g.value("y")]}
    g.verify()


def test_create_op_makes_name_hints_unique():
    graphc.data("x", [-1, 4])
    g = lowered()
    rw = g.rewriter()
    first = rw.create_op("relu", {"X": g.value("x")}, {"Out": "x"})
    second = rw.create_op("relu", {"X": g.value("x")}, {"Out": "x"})
    names = {g.value("x").name, first.output("Out").name, second.output("Out").name}
    assert len(names) == 3
    g.verify()


def test_create_op_writes_given_values_and_checks_their_type():
    graphc.data("x", [-1, 4])
    g = lowered()
    rw = g.rewriter()
    target = rw.new_value("target", TensorType((-1, 4), "float32"))
    op = rw.create_op("tanh", {"X": g.value("x")}, {"Out": target})
    assert op.output("Out") is target
    wrong = rw.new_value("wrong", TensorType((-1, 5), "float32"))
    with pytest.raises(ShapeError, match="is f32\\[-1,5\\] but the op produces f32\\[-1,4\\]"):
        rw.create_op("tanh", {"X": g.value("x")}, {"Out": wrong})
    with pytest.raises(ShapeError, match="given 2 values but the op produces 1"):
        rw.create_op("split", {"X": g.value("x")}, {"Out": ["a", "b"]}, {"num": 1, "axis": 1})
    rw.erase_value(wrong)
    g.verify()


@pytest.mark.parametrize("op_type, inputs, attrs, error, message", [
    ("no_such_op", {"X": "x"}, {}, UnknownOpError, "unknown op type 'no_such_op'"),
    ("relu", {}, {}, OpDefinitionError, "missing required input slot 'X'"),
    ("relu", {"X": "x", "Y": "x"}, {}, OpDefinitionError, "no input slot 'Y'"),
    ("scale", {"X": "x"}, {"scale": "big"}, OpDefinitionError, "expects float"),
    ("scale", {"X": "x"}, {"factor": 2.0}, OpDefinitionError, "unknown attribute 'factor'"),
    ("softmax", {"X": "x"}, {"axis": 5}, ShapeError, "axis 5 is out of range"),
    ("relu", {"X": "foreign"}, {}, ProgramError, "is not a value of this graph"),
])
def test_create_op_rejects_bad_ops_and_leaves_the_graph_alone(op_type, inputs, attrs, error,
                                                              message):
    graphc.data("x", [-1, 4])
    g = lowered()
    foreign = graphc.lower(graphc.default_main_program()).value("x")
    before = g.to_text()
    values = {"x": g.value("x"), "foreign": foreign}
    rw = g.rewriter()
    with pytest.raises(error, match=re.escape(message)):
        rw.create_op(op_type, {k: values[v] for k, v in inputs.items()}, {"Out": "o"}, attrs)
    assert g.to_text() == before and not rw.changed
    g.verify()


# ----------------------------------------------------------------------------- provenance


def test_provenance_records_the_replaced_ops_and_the_pass():
    g, ops = chain()
    relu, tanh = ops["relu"], ops["tanh"]
    rw = g.rewriter("fuse-relu-tanh")
    fused = rw.create_op("tanh", {"X": g.value("x")}, {"Out": "fused"},
                         derived_from=[relu, tanh])
    assert fused.provenance == (("relu", relu.source), ("tanh", tanh.source),
                                ("pass", "fuse-relu-tanh"))
    assert fused.source == relu.source and fused.role == relu.role
    # a second rewrite keeps the whole history
    again = g.rewriter("second").create_op("tanh", {"X": g.value("x")}, {"Out": "again"},
                                           derived_from=[fused])
    assert again.provenance == fused.provenance + (("pass", "second"),)
    # no origin: nothing claims a pass
    plain = g.rewriter().create_op("relu", {"X": g.value("x")}, {"Out": "plain"})
    assert plain.provenance == () and plain.source is None and plain.role == "forward"


def test_explicit_source_and_role_win():
    g, ops = chain()
    op = g.rewriter("p").create_op("relu", {"X": g.value("x")}, {"Out": "r"},
                                   derived_from=[ops["tanh"]], source="model.py:7",
                                   role="backward")
    assert op.source == "model.py:7" and op.role == "backward"
    assert 'op_role="backward"' in g.to_text()
    g.verify()


# --------------------------------------------------------------------------------- events


def test_events_reach_listeners():
    g, ops = chain()
    events = []
    rw = g.rewriter("p")
    rw.listeners.append(lambda kind, info: events.append((kind, info)))
    assert not rw.changed
    relu = ops["relu"]
    new = rw.create_op("relu", {"X": g.value("x")}, {"Out": "r"}, derived_from=[relu])
    rw.replace_all_uses(relu.output("Out"), new.output("Out"))
    rw.erase_op(relu)
    rw.set_attr(ops["elementwise_add"], "axis", 0)
    rw.set_input(ops["tanh"], "X", 0, g.value("x"))
    assert [k for k, _ in events] == ["new_value", "insert_op", "replace_uses", "erase_op",
                                      "set_attr", "set_input"]
    info = dict(events)
    assert info["new_value"]["value"] is new.output("Out")
    assert info["insert_op"]["op"] is new and info["insert_op"]["derived_from"] == [relu]
    assert info["replace_uses"]["count"] == 1 and info["replace_uses"]["new"].name == "r"
    assert info["erase_op"]["op"] is relu
    assert info["set_attr"] == {"op": ops["elementwise_add"], "name": "axis", "value": 0}
    assert info["set_input"]["old"] is new.output("Out")
    assert info["set_input"]["new"] is g.value("x")
    assert rw.changed


def test_listeners_on_the_graph_are_picked_up_by_new_rewriters():
    g, ops = chain()
    seen = []
    g.listeners = [lambda kind, info: seen.append(kind)]
    g.rewriter().set_attr(ops["elementwise_add"], "axis", -1)
    assert seen == ["set_attr"]


# ---------------------------------------------------------------------- replace_all_uses


def test_replace_all_uses_moves_every_edge():
    x = graphc.data("x", [-1, 3])
    h = layers.relu(x)
    layers.elementwise_mul(h, h)
    layers.tanh(h)
    g = lowered()
    old = g.value("relu_0.tmp_0")
    rw = g.rewriter()
    new = rw.create_op("sigmoid", {"X": g.value("x")}, {"Out": "s"}).output("Out")
    assert rw.replace_all_uses(old, new) == 3  # X and Y of the mul, X of the tanh
    assert old.users == [] and len(new.users) == 3
    assert rw.replace_all_uses(new, new) == 0
    g.verify()


def test_replace_all_uses_includes_graph_outputs():
    layers.batch_norm(graphc.data("x", [-1, 3, 2, 2]))
    g = lowered()
    bn = g.ops()[0]
    mean_out = bn.output("MeanOut")
    assert mean_out in g.outputs
    rw = g.rewriter()
    # the updated running mean now comes from a copy of the old one: a new version
    copy = rw.create_op("assign", {"X": bn.input("Mean")}, {"Out": rw.new_version(mean_out)})
    assert rw.replace_all_uses(mean_out, copy.output("Out")) == 1
    assert mean_out not in g.outputs and copy.output("Out") in g.outputs
    assert copy.output("Out").name == "batch_norm_0.w_1#2"
    g.verify()


def test_replace_all_uses_refuses_other_types():
    g, ops = chain()
    rw = g.rewriter()
    wide = rw.new_value("wide", TensorType((-1, 4), "float32"))
    with pytest.raises(ShapeError, match="types differ"):
        rw.replace_all_uses(ops["relu"].output("Out"), wide)
    f64 = rw.new_value("f64", TensorType((-1, 3), "float64"))
    with pytest.raises(ShapeError, match="types differ"):
        rw.replace_all_uses(ops["relu"].output("Out"), f64)


def test_replace_all_uses_except_ops():
    g, ops = chain()
    relu_out = ops["relu"].output("Out")
    rw = g.rewriter()
    extra = rw.create_op("sigmoid", {"X": relu_out}, {"Out": "extra"}, after=ops["relu"])
    late = rw.create_op("relu", {"X": g.value("x")}, {"Out": "late"}).output("Out")
    assert rw.replace_all_uses(relu_out, late, except_ops=[extra]) == 1
    assert extra.input("X") is relu_out and ops["tanh"].input("X") is late
    g.verify()


# ---------------------------------------------------------------------------- erase_op


def test_erase_op_refuses_while_outputs_are_used():
    g, ops = chain()
    before = g.to_text(show_source=True)
    with pytest.raises(ProgramError, match="still used by op tanh at .*test_rewriter.py:\\d+"):
        g.rewriter().erase_op(ops["relu"])
    assert g.to_text(show_source=True) == before and ops["relu"].id in g.ops_by_id
    g.verify()


def test_erase_op_refuses_graph_outputs():
    layers.batch_norm(graphc.data("x", [-1, 3, 2, 2]))
    g = lowered()
    with pytest.raises(ProgramError, match="is a graph output"):
        g.rewriter().erase_op(g.ops()[0])
    g.verify()


def test_erase_unused_op_and_its_outputs():
    g, ops = chain()
    rw = g.rewriter()
    dead = rw.create_op("dropout", {"X": g.value("x")}, {"Out": "d", "Mask": "m"})
    rw.erase_op(dead)
    assert "d" not in g.values and "m" not in g.values and "d" not in g.vars
    assert dead not in g.nx
    g.verify()


def test_erasing_the_first_write_of_a_variable_keeps_its_later_versions():
    x = graphc.data("x", [-1, 3])
    t = layers.fill_constant([3], "float32", 1.0)
    layers.fill_constant([3], "float32", 2.0, out=t)  # t is written again: t#1
    layers.elementwise_add(x, t)
    g = lowered()
    rw = g.rewriter("dce")
    rw.erase_op(g.ops()[0])  # t (version 0) is never read
    assert "fill_constant_0.tmp_0" in g.vars
    g.verify()
    assert graphc.parse(g.to_text()).structurally_equal(g)
    # once its last version goes, the variable goes too
    add = g.ops()[1]
    rw.set_input(add, "Y", 0, rw.create_op("fill_constant", {}, {"Out": "c"},
                                           {"shape": [3]}).output("Out"))
    rw.erase_op(g.ops()[0])
    assert "fill_constant_0.tmp_0" not in g.vars
    g.verify()
    assert graphc.parse(g.to_text()).structurally_equal(g)


def test_erase_op_keeping_outputs_lets_a_new_op_write_them():
    g, ops = chain()
    relu = ops["relu"]
    out = relu.output("Out")
    before = g.to_text(show_source=True)
    rw = g.rewriter("swap")
    rw.erase_op(relu, erase_outputs=False)
    new = rw.create_op("tanh", {"X": g.value("x")}, {"Out": out}, derived_from=[relu])
    assert out.producer is new
    g.verify()
    assert g.to_text(show_source=True) == before.replace("= relu(X=%x)", "= tanh(X=%x)")


def test_erase_value():
    graphc.data("x", [-1, 3])
    graphc.data("unused", [2])
    layers.relu(graphc.default_main_program().global_block().var("x"))
    g = lowered()
    rw = g.rewriter()
    with pytest.raises(ProgramError, match="still defined or used"):
        rw.erase_value(g.value("x"))
    rw.erase_value(g.value("unused"))
    assert [v.name for v in g.inputs] == ["x"] and "unused" not in g.vars
    g.verify()


# ------------------------------------------------------------------- set_input / set_attr


def test_set_input_rewires_one_operand():
    g, ops = chain()
    add = ops["elementwise_add"]
    rw = g.rewriter()
    rw.set_input(add, "Y", 0, ops["sigmoid"].output("Out"))
    assert add.input("X") is add.input("Y") is ops["sigmoid"].output("Out")
    assert ops["tanh"].output("Out").users == []
    g.verify()


def test_set_attr_normalizes_and_checks():
    g, ops = chain()
    rw = g.rewriter()
    rw.set_attr(ops["elementwise_add"], "axis", 0)
    assert ops["elementwise_add"].attrs["axis"] == 0
    scale = rw.create_op("scale", {"X": g.value("x")}, {"Out": "s"})
    rw.set_attr(scale, "scale", 3)  # ints are coerced for float attributes
    assert scale.attrs["scale"] == 3.0 and type(scale.attrs["scale"]) is float
    before = dict(scale.attrs)
    with pytest.raises(OpDefinitionError, match="expects bool"):
        rw.set_attr(scale, "bias_after_scale", "no")
    with pytest.raises(OpDefinitionError, match="unknown attribute 'gamma'"):
        rw.set_attr(scale, "gamma", 1.0)
    assert scale.attrs == before
    g.verify()
    assert "{scale=3.0}" in g.to_text()


# A refused edit leaves the graph as it was.


def test_failed_create_op_with_a_produced_output_leaves_no_op():
    g, ops = chain()
    rw = g.rewriter()
    with pytest.raises(ProgramError, match="already has a producer"):
        rw.create_op("tanh", {"X": g.value("x")}, {"Out": ops["relu"].output("Out")})
    assert g.num_ops == 4
    g.verify()


def test_failed_create_op_leaves_no_orphan_values():
    g, _ = chain()
    rw = g.rewriter()
    wrong = rw.new_value("wrong_mask", TensorType((-1, 3), "float32"))  # Mask is uint8
    with pytest.raises(ShapeError, match="Mask"):
        rw.create_op("dropout", {"X": g.value("x")}, {"Out": "d", "Mask": wrong})
    rw.erase_value(wrong)
    assert "d" not in g.values
    g.verify()


def test_set_input_refuses_a_value_of_another_graph():
    g, ops = chain()
    other = graphc.lower(graphc.default_main_program())
    with pytest.raises(graphc.GraphcError):
        g.rewriter().set_input(ops["tanh"], "X", 0, other.value("x"))
    g.verify()


def test_set_input_refuses_a_value_of_another_type():
    g, ops = chain()
    rw = g.rewriter()
    wide = rw.new_value("wide", TensorType((5, 7), "float32"))
    with pytest.raises(graphc.GraphcError):
        rw.set_input(ops["tanh"], "X", 0, wide)
    rw.erase_value(wide)
    g.verify()


# -------------------------------------------------------------------- realistic rewrites


def test_replace_relu_by_a_new_relu_prints_in_its_place():
    g, ops = chain()
    before = g.to_text(show_source=True)
    relu = ops["relu"]
    old_out = relu.output("Out")
    rw = g.rewriter("replace-relu")
    new = rw.create_op("relu", {"X": relu.input("X")}, {"Out": "relu_new"},
                       derived_from=[relu])
    rw.replace_all_uses(old_out, new.output("Out"))
    rw.erase_op(relu)
    g.verify()
    # the same text with the new name: same place, same source line, same everything else
    assert g.to_text(show_source=True) == rename(before, old_out.name, "relu_new")
    assert graphc.parse(g.to_text(show_source=True)).structurally_equal(g, check_source=True)


def test_insert_scale_between_two_ops():
    g, ops = chain()
    relu, tanh = ops["relu"], ops["tanh"]
    before = g.to_text().splitlines()
    rw = g.rewriter("insert-scale")
    scale = rw.create_op("scale", {"X": relu.output("Out")}, {"Out": "scaled"},
                         {"scale": 0.5}, after=relu)
    assert rw.replace_all_uses(relu.output("Out"), scale.output("Out"),
                               except_ops=[scale]) == 1
    g.verify()
    lines = g.to_text().splitlines()
    i = next(i for i, line in enumerate(lines) if "= relu(" in line)
    assert lines[i + 1] == "  %scaled: f32[-1,3] = scale(X=%relu_0.tmp_0) {scale=0.5}"
    assert lines[:i + 1] == before[:i + 1]
    assert "tanh(X=%scaled)" in g.to_text()
    assert tanh.input("X") is scale.output("Out")
    assert scale.source == relu.source and scale.provenance == (("pass", "insert-scale"),)


def test_anchorless_op_prints_last_and_def_use_beats_the_anchor():
    g, ops = chain()
    rw = g.rewriter()
    rw.create_op("relu", {"X": g.value("x")}, {"Out": "late"})
    # anchored after relu, but it reads tanh's output: it must print after tanh
    rw.create_op("sigmoid", {"X": ops["tanh"].output("Out")}, {"Out": "after_tanh"},
                 after=ops["relu"])
    types = [op.type for op in g.ops()]
    assert types == ["relu", "sigmoid", "tanh", "sigmoid", "elementwise_add", "relu"]
    g.verify()


def test_rewrites_print_deterministically():
    def rewritten() -> str:
        with graphc.program_guard(graphc.Program(), graphc.Program()), \
                graphc.unique_name.guard():
            g, ops = chain()
        rw = g.rewriter("p")
        relu = ops["relu"]
        new = rw.create_op("relu", {"X": relu.input("X")}, {"Out": "r"}, derived_from=[relu])
        rw.create_op("scale", {"X": new.output("Out")}, {"Out": "s"}, after=new)
        rw.replace_all_uses(relu.output("Out"), new.output("Out"))
        rw.erase_op(relu)
        return g.to_text(show_source=True)

    first = rewritten()
    assert first == rewritten()
    assert first.index("= relu(") < first.index("= scale(") < first.index("= sigmoid(")


def test_new_version_of_a_parameter():
    layers.fc(graphc.data("x", [-1, 3]), 2)
    g = lowered()
    w = g.value("fc_0.w_0")
    rw = g.rewriter("update")
    upd = rw.create_op("scale", {"X": w}, {"Out": rw.new_version(w)}, {"scale": 0.9},
                       role="optimize")
    rw.set_outputs([upd.output("Out") if v is w else v for v in g.outputs])
    assert upd.output("Out").name == "fc_0.w_0#1" and upd.output("Out").var is w.var
    g.verify()
    text = g.to_text()
    assert "output %fc_0.w_0#1" in text
    assert graphc.parse(text).structurally_equal(g)


# --------------------------------------------------------- replacing ops of random graphs


@given(g=random_graphs(max_ops=6), data=st.data())
def test_replacing_any_op_by_a_clone_keeps_the_graph(g, data):
    before = g.to_text()
    order = [(op.type, op.attrs) for op in g.ops()]
    op = data.draw(st.sampled_from(g.ops()))
    rw = g.rewriter("clone")
    outputs = {}
    for slot, vals in op.outputs.items():
        # state keeps its variable (a new version); temporaries get fresh names
        outputs[slot] = [rw.new_version(v) if v.var.persistable else f"{v.name}.clone"
                         for v in vals]
    clone = rw.create_op(op.type, op.inputs, outputs, op.attrs, derived_from=[op])
    for old, new in zip(op.output_values(), clone.output_values(), strict=True):
        assert new.type == old.type
        rw.replace_all_uses(old, new)
    rw.erase_op(op)
    g.verify()
    assert [(o.type, o.attrs) for o in g.ops()] == order  # printed where the old op was
    assert g.to_text().count("\n") == before.count("\n")
    assert graphc.parse(g.to_text(show_source=True)).structurally_equal(g, check_source=True)
