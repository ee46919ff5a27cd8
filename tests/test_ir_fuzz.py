"""Fuzzing the IR's contracts: any text parses to a graph that verifies, prints, parses back
equal and converts to a Program, or raises ParseError/VerifyError; any graph a buggy pass can
leave makes the verifier raise VerifyError (never another exception)."""

from __future__ import annotations

import os
import re
from typing import ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphc
from graphc.ir import ParseError, VerifyError, parse
from graphc.ir.opdef import all_op_types
from graphc.ir.text import structural_key
from graphc.ir.to_program import graph_to_program
from graphc.ir.types import TensorType
from graphc.passes import Pass, PassFailure, PassManager
from graphc.testing import random_graphs

# parsing is fast: many more examples than the profile's default, fewer in CI
EXAMPLES = 300 if os.environ.get("HYPOTHESIS_PROFILE") == "ci" else 3000
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

TOKENS = ["%", "#", "#0", "#01", "{", "}", "(", ")", "[", "]", ",", "=", ":", "\"", "\\",
          "f32", "i64", "bf16", "u8", "-1", "-7", "0", "99999999999999999999", "1e309", "NaN",
          "loc(", "selected_rows<", ">", "{feed}", "{param}", "{persistable}", "{}",
          "{shard=[2,[0]]}", "{shard=[0,[5]]}", "{shard=[true,[]]}", "{lod_level=-3}",
          "{learning_rate=\"x\"}", "{trainable=[1]}", "{stop_gradient=2}", "output %",
          "input %", "(random_seed=\"x\")", "(random_seed=-1)", "\n", "op_role=\"nope\"",
          "{axis=[]}", "[" * 3000, "[-1,-1]", "[0]", "[]", "%a%b", "\u00e9", "\x00"]
OPS = sorted(all_op_types())


@st.composite
def mutated_texts(draw):
    text = draw(random_graphs(max_ops=5)).to_text()
    for _ in range(draw(st.integers(1, 3))):
        lines = text.splitlines()
        kind = draw(st.sampled_from(["cut", "insert", "dup", "swap", "drop", "number", "name",
                                     "dtype", "op"]))
        if kind == "cut" and len(text) > 1:
            i = draw(st.integers(0, len(text) - 1))
            text = text[:i] + text[i + draw(st.integers(1, 8)):]
        elif kind == "insert":
            i = draw(st.integers(0, len(text)))
            text = text[:i] + draw(st.sampled_from(TOKENS)) + text[i:]
        elif kind in ("dup", "swap", "drop") and len(lines) > 3:
            i = draw(st.integers(1, len(lines) - 2))
            j = draw(st.integers(1, len(lines) - 2))
            if kind == "dup":
                lines.insert(j, lines[i])
            elif kind == "swap":
                lines[i], lines[j] = lines[j], lines[i]
            else:
                del lines[i]
            text = "\n".join(lines)
        else:
            pattern = {"number": r"-?\d+", "name": r"%[\w.@#]+", "dtype": r"\b(f32|f64|i64)\b",
                       "op": r"(?<== )\w+(?=\()"}.get(kind, r"-?\d+")
            found = list(re.finditer(pattern, text))
            if found:
                m = draw(st.sampled_from(found))
                new = {"number": st.sampled_from(["0", "-1", "-7", "2", "65536",
                                                  "99999999999999999999"]),
                       "name": st.sampled_from([f.group() for f in found]),
                       "dtype": st.sampled_from(["f32", "f64", "i64", "i32", "b1", "f16"]),
                       "op": st.sampled_from(OPS)}[kind if kind in ("number", "name", "dtype",
                                                                    "op") else "number"]
                text = text[:m.start()] + draw(new) + text[m.end():]
    return text


@FUZZ
@given(mutated_texts())
def test_any_text_parses_to_a_usable_graph_or_raises_parse_or_verify_error(text):
    try:
        g = parse(text)
        g.verify()
    except (ParseError, VerifyError):
        return
    again = parse(g.to_text())
    assert structural_key(again) == structural_key(g)
    graphc.lower(graph_to_program(g)).verify()


# -- what a buggy pass can do to a graph -----------------------------------------------------
def _some(draw, items):
    items = list(items)
    return draw(st.sampled_from(items)) if items else None


CORRUPTIONS = {
    "value type junk": lambda g, v, op: setattr(v, "type", "f32[3]"),
    "value dims below -1": lambda g, v, op: setattr(v, "type", TensorType((-5,), "float32")),
    "value dims not ints": lambda g, v, op: setattr(v, "type", TensorType((2.5,), "float32")),
    "value dtype unknown": lambda g, v, op: setattr(v, "type", TensorType((2,), "complex7")),
    "value var junk": lambda g, v, op: setattr(v, "var", None),
    "var kind junk": lambda g, v, op: setattr(v.var, "kind", "weird"),
    "version negative": lambda g, v, op: setattr(v, "version", -1),
    "op type int": lambda g, v, op: setattr(op, "type", 5),
    "op type unknown": lambda g, v, op: setattr(op, "type", "no_such_op"),
    "op attrs list": lambda g, v, op: setattr(op, "attrs", [1, 2]),
    "op attr junk": lambda g, v, op: op.attrs.update({"no_such_attr": object()}),
    "op role junk": lambda g, v, op: setattr(op, "role", 7),
    "op source int": lambda g, v, op: setattr(op, "source", 12),
    "node removed from nx": lambda g, v, op: g.nx.remove_node(v),
    "op removed from nx": lambda g, v, op: g.nx.remove_node(op),
    "edge with bad key": lambda g, v, op: g.nx.add_edge(v, op, key="X"),
    "edge value to value": lambda g, v, op: g.nx.add_edge(v, v, key=("X", 0)),
    "outputs hold a string": lambda g, v, op: g.outputs.append("loss"),
    "outputs not a list": lambda g, v, op: setattr(g, "outputs", None),
    "inputs hold a temp": lambda g, v, op: g.inputs.append(v),
    "value renamed": lambda g, v, op: setattr(v, "name", v.name + "_x"),
    "stray node": lambda g, v, op: g.nx.add_node(42),
    "param of unknown shape": lambda g, v, op: (
        setattr(v.var, "kind", "param"), setattr(v, "type", TensorType((-1, 3), "float32"))),
}


@FUZZ
@given(random_graphs(max_ops=5), st.sampled_from(sorted(CORRUPTIONS)), st.data())
def test_the_verifier_answers_any_corruption_with_verify_error(graph, corruption, data):
    graph.verify()
    temps = [v for v in graph.values.values() if v.var.kind == "temp"] or list(
        graph.values.values())
    v = data.draw(st.sampled_from(sorted(temps, key=lambda x: x.name)))
    op = data.draw(st.sampled_from(sorted(graph.ops(), key=lambda o: o.id)))
    CORRUPTIONS[corruption](graph, v, op)
    with pytest.raises(VerifyError):
        graph.verify()


class DropOutputs(Pass):
    """A buggy pass: forgets the graph's outputs."""

    name: ClassVar[str] = "test-drop-outputs"

    def run(self, graph, ctx):
        graph.outputs.clear()


@pytest.mark.parametrize("verify_each", [False, True])
def test_the_pass_manager_catches_a_pass_that_drops_outputs(verify_each):
    g = parse("graph @g {\n  input %x: f32[-1,3] {feed}\n  %y: f32[-1,3] = relu(X=%x)\n"
              "  output %y\n}")
    with pytest.raises(PassFailure, match=r"test-drop-outputs.*dropped graph outputs.*no "
                                          r"longer outputs \['y'\]"):
        PassManager([DropOutputs()], verify_each=verify_each).run(g)


@pytest.mark.parametrize("text, message", [
    ("graph @g {\n  input %x: f32[-1,-7] {feed}\n  output %x\n}", "dimensions are -1"),
    ("graph @g {\n  input %x: f32[3] {feed, learning_rate=\"x\"}\n  output %x\n}",
     "learning_rate must be a finite number"),
    ("graph @g {\n  input %x: f32[3] {feed, trainable=[1]}\n  output %x\n}",
     "trainable must be true or false"),
    ("graph @g {\n  input %x: f32[3] {feed, lod_level=-3}\n  output %x\n}",
     r"lod_level must be an integer in \[0, 8\]"),
    ("graph @g {\n  input %x: f32[3] {feed, shard=[0,[5]]}\n  output %x\n}", "shard must be"),
    ("graph @g(random_seed=\"x\") {\n}", "random_seed must be an integer"),
    ("graph @g {\n  input %a%b: f32[3] {feed}\n  output %a%b\n}", "bad variable name 'a%b'"),
    ("graph @g {\n  input %x#0: f32[3] {feed}\n}", r"bad version in '%x#0'"),
    ("graph @g {\n  input %x: f32[3] {feed}\n  %y: f32[3] = scale(X=%x) {scale=" + "[" * 5000
     + "}\n}", "nested too deeply|expected a value"),
])
def test_malformed_texts_are_parse_errors_with_a_location(text, message):
    with pytest.raises(ParseError, match=message) as info:
        parse(text)
    assert 1 <= info.value.line <= text.count("\n") + 1


def test_a_temporary_graph_input_does_not_verify():
    g = parse("graph @g {\n  input %x: f32[3] {}\n  %y: f32[3] = relu(X=%x)\n  output %y\n}")
    with pytest.raises(VerifyError, match="graph input %x is a temporary"):
        g.verify()


def test_a_parameter_of_unknown_shape_does_not_verify():
    g = parse("graph @g {\n  input %w: f32[-1,3] {param}\n  %y: f32[-1,3] = relu(X=%w)\n"
              "  output %y\n}")
    with pytest.raises(VerifyError, match="parameters need a fully known shape"):
        g.verify()
