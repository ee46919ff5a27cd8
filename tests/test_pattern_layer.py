"""The pattern layer (graphc/passes/infra/): guards decline with the passes' standard reasons,
optional second roots, node options, the driver's order, fixed point and statistics, and a
pattern-based pass keeping interpreter results on random programs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import given, settings

from graphc import layers
from graphc.ir.text import parse
from graphc.passes import (
    Driver,
    Extension,
    Node,
    Pass,
    PassContext,
    PassError,
    Pattern,
    guards,
    make_pass,
    pattern_from_example,
    register_pass,
    run_patterns,
)
from graphc.testing import check_pass, random_programs


def affine(op):
    """(a, c) with ``scale(x) == a * x + c``."""
    s, b = op.attrs["scale"], op.attrs["bias"]
    return (s, b) if op.attrs["bias_after_scale"] else (s, s * b)


def fold(m, ctx: PassContext) -> None:
    (a1, c1), (a2, c2) = affine(m.first), affine(m.second)
    rw = ctx.rewriter
    rw.erase_op(m.second, erase_outputs=False)
    rw.erase_op(m.first)
    rw.create_op("scale", {"X": m.x}, {"Out": m.y},
                 {"scale": a1 * a2, "bias": a2 * c1 + c2, "bias_after_scale": True},
                 derived_from=[m.first, m.second])


FIRST = Node("first", "scale", ins={"X": "x"}, outs={"Out": "t"})
SECOND = Node("second", "scale", ins={"X": "t"}, outs={"Out": "y"})
GUARDS = (guards.SingleUse("t"), guards.SameRole(("first", "second")),
          guards.NoControlDeps(("first", "second"), ("t",)))
# anchored at the second scale (a chain folds in one sweep) or at the first (it needs more)
AT_SECOND = Pattern("scale of scale", (SECOND, FIRST), GUARDS, fold, stat="folded")
AT_FIRST = Pattern("scale then scale", (FIRST, SECOND), GUARDS, fold, stat="folded")


def graph_of(body: str):
    return parse("graph @main {\n  input %x: f32[-1,4] {feed}\n" + body + "\n}\n").verify()


def run(graph, *phases, keep=(), fixed_point=False):
    ctx = PassContext(graph, "test-patterns", keep=[graph.value(k) for k in keep])
    driver = Driver(phases, fixed_point)
    driver.run(graph, ctx)
    graph.verify()
    return ctx, driver


CHAIN = """  %a: f32[-1,4] = scale(X=%x) {scale=2.0, bias=1.0}
  %b: f32[-1,4] = scale(X=%a) {scale=3.0}
  %c: f32[-1,4] = scale(X=%b) {scale=0.5, bias=-1.0}
  output %c"""


def scales(graph) -> int:
    return graph.stats().get("scale", 0)


# -- guards -------------------------------------------------------------------------------
@pytest.mark.parametrize("body, keep, reason", [
    ("  %a: f32[-1,4] = scale(X=%x)\n  %b: f32[-1,4] = scale(X=%a)\n"
     "  %r: f32[-1,4] = relu(X=%a)\n  output %b\n  output %r", (), "intermediate has 2 users"),
    ("  %a: f32[-1,4] = scale(X=%x)\n  %b: f32[-1,4] = scale(X=%a)\n  output %b", ("a",),
     "intermediate is fetched"),
    ("  %a: f32[-1,4] = scale(X=%x)\n  %b: f32[-1,4] = scale(X=%a)\n  output %a\n  output %b",
     (), "intermediate is a graph output"),
    ("  %a: f32[-1,4] = scale(X=%x)\n"
     "  %b: f32[-1,4] = scale(X=%a) {op_role=\"backward\"}\n  output %b", (),
     "ops have different roles"),
    ("  %z: f32[-1,4] = relu(X=%x)\n  %a: f32[-1,4] = scale(X=%x)\n"
     "  %b: f32[-1,4] = scale(X=%a, _deps=[%z])\n  output %b", (), "control dependencies"),
])
def test_guards_decline_with_the_standard_reasons(body, keep, reason):
    graph = graph_of(body)
    ctx, driver = run(graph, [AT_SECOND], keep=keep)
    assert dict(ctx.stats) == {f"skipped: {reason}": 1}
    assert scales(graph) == 2
    stats = driver.stats["scale of scale"]
    assert (stats.matched, stats.rewritten, dict(stats.declined)) == (1, 0, {reason: 1})


def test_a_value_waited_on_through_deps_is_a_control_dependency():
    graph = graph_of("  %a: f32[-1,4] = scale(X=%x)\n  %b: f32[-1,4] = scale(X=%a)\n"
                     "  %r: f32[-1,4] = relu(X=%x, _deps=[%a])\n  output %b\n  output %r")
    # SingleUse would say "has 2 users": the control-deps guard goes first here
    pattern = Pattern("p", (SECOND, FIRST), (guards.NoControlDeps(("first",), ("t",)),) + GUARDS)
    ctx, _ = run(graph, [pattern])
    assert dict(ctx.stats) == {"skipped: control dependencies": 1}


def test_reasons_name_what_was_matched():
    graph = graph_of("  %a: f32[-1,4] = scale(X=%x)\n  %b: f32[-1,4] = tanh(X=%a)\n  output %b")
    act = Node("act", {"relu", "tanh"}, ins={"X": "t"})
    pattern = Pattern("p", (FIRST, act), (
        guards.TypeIn("act", {"relu"}, "activation {act.type} not in act_types"),))
    ctx, _ = run(graph, [pattern])
    assert dict(ctx.stats) == {"skipped: activation tanh not in act_types": 1}
    for guard, reason in [(guards.Check(lambda m, ctx: m.act.type == "relu", "{act.type}!"),
                           "tanh!"),
                          (guards.Check(lambda m, ctx: f"computed for {m.t.name}"),
                           "computed for a"),
                          (guards.Never("never {first.type}"), "never scale"),
                          (guards.NotFetched("t", "the scale's output"), None)]:
        ctx, _ = run(graph, [Pattern("p", (FIRST, act), (guard,), lambda m, ctx: None)])
        assert dict(ctx.stats) == ({f"skipped: {reason}": 1} if reason else {})


def test_only_read_by_counts_each_allowed_reader_once():
    graph = graph_of("  %a: f32[-1,4] = scale(X=%x)\n  %b: f32[-1,4] = elementwise_add(X=%a, "
                     "Y=%a)\n  output %b")
    add = Node("add", "elementwise_add", ins={"X": "t"})
    for readers, reason in [((("add", "X"),), "intermediate has 2 users"),
                            ((("add", "X"), ("add", "Y")), None),
                            ((("add", "X"), ("missing", "Y")), "intermediate has 2 users")]:
        pattern = Pattern("p", (FIRST, add), (guards.OnlyReadBy("t", readers),),
                          lambda m, ctx: None)
        ctx, _ = run(graph, [pattern])
        assert dict(ctx.stats) == ({f"skipped: {reason}": 1} if reason else {}), readers


# -- two roots and node options ---------------------------------------------------------
GRAD_GRAPH = """  input %g: f32[-1,4] {feed}
  %y: f32[-1,4] = relu(X=%x)
  %dx: f32[-1,4] = relu_grad(Out=%y, Out@GRAD=%g) {op_role="backward"}
  output %y
  output %dx"""


def grad_pattern(found: list, ext_guards=(), unique=False) -> Pattern:
    return Pattern(
        "relu with its grad", (Node("act", "relu", ins={"X": "x"}, outs={"Out": "y"}),),
        rewrite=lambda m, ctx: found.append(m),
        extensions=(Extension((Node("grad", "relu_grad", ins={"Out": "y", "Out@GRAD": "g"},
                                    outs={"X@GRAD": "dx"}, unique=unique),),
                              tuple(ext_guards)),))


def test_a_second_root_binds_the_grad_op_or_none():
    found: list = []
    graph = graph_of(GRAD_GRAPH)
    run(graph, [grad_pattern(found)])
    (m,) = found
    assert m.grad.type == "relu_grad" and m.dx.name == "dx" and m.g.name == "g"
    assert m.ops("act", "grad") == [m.act, m.grad]

    found.clear()
    run(graph_of("  %y: f32[-1,4] = relu(X=%x)\n  output %y"), [grad_pattern(found)])
    (m,) = found
    assert m.grad is None and m.dx is None and m.ops("act", "grad") == [m.act]


def test_a_second_root_whose_guards_fail_is_left_unbound():
    found: list = []
    run(graph_of(GRAD_GRAPH), [grad_pattern(found, [guards.Never("no")])])
    (m,) = found
    assert m.grad is None


def test_unique_refuses_an_ambiguous_pairing():
    two = GRAD_GRAPH + "\n  %dx2: f32[-1,4] = relu_grad(Out=%y, Out@GRAD=%g)\n  output %dx2"
    for unique, paired in [(False, True), (True, False)]:
        found: list = []
        run(graph_of(two), [grad_pattern(found, unique=unique)])
        assert (found[0].grad is not None) is paired


def test_many_optional_slots_and_any_slot():
    graph = graph_of("  %a: f32[-1,4] = scale(X=%x)\n  %r: f32[-1,4] = relu(X=%a)\n"
                     "  %s: f32[-1,4] = elementwise_add(X=%x, Y=%a)\n  output %r\n  output %s")
    found: list = []
    readers = Node("readers", lambda t: True, ins={"*": "t"}, many=True)
    run(graph, [Pattern("p", (FIRST, readers), rewrite=lambda m, ctx: found.append(m))])
    assert [op.type for op in found[0].readers] == ["relu", "elementwise_add"]
    # an optional slot the op lacks fits any binding; one it has must agree with it
    found.clear()
    adder = Node("add", "elementwise_add", ins={"Y": "t", "X?": "x", "Bias?": "nothing"})
    run(graph, [Pattern("p", (FIRST, adder), rewrite=lambda m, ctx: found.append(m))])
    assert found[0].add.type == "elementwise_add" and found[0].nothing is None


def test_a_disconnected_node_is_refused():
    with pytest.raises(PassError, match="shares no value"):
        Pattern("p", (FIRST, Node("other", "relu", ins={"X": "z"})))
    with pytest.raises(PassError, match="repeat"):
        Driver([[AT_FIRST], [AT_FIRST]])


# -- the driver -------------------------------------------------------------------------
def test_one_sweep_folds_a_chain_anchored_at_its_end():
    graph = graph_of(CHAIN)
    ctx, driver = run(graph, [AT_SECOND])
    assert scales(graph) == 1 and dict(ctx.stats) == {"folded": 2} and driver.sweeps == 1


def test_fixed_point_repeats_sweeps_until_nothing_changes():
    graph = graph_of(CHAIN)
    ctx, driver = run(graph, [AT_FIRST])
    assert scales(graph) == 2 and dict(ctx.stats) == {"folded": 1}

    graph = graph_of(CHAIN)
    ctx, driver = run(graph, [AT_FIRST], fixed_point=True)
    assert scales(graph) == 1 and dict(ctx.stats) == {"folded": 2}
    assert driver.sweeps == 3  # two that folded, one that found nothing
    stats = driver.stats["scale then scale"]
    assert (stats.matched, stats.rewritten) == (2, 2)


def test_fixed_point_reports_the_last_sweeps_declines_once():
    graph = graph_of(CHAIN + "\n  %p: f32[-1,4] = scale(X=%x)\n  %q: f32[-1,4] = scale(X=%p)\n"
                     "  %r: f32[-1,4] = relu(X=%p)\n  output %q\n  output %r")
    ctx, driver = run(graph, [AT_FIRST], fixed_point=True)
    assert driver.sweeps == 3
    assert dict(ctx.stats) == {"folded": 2, "skipped: intermediate has 2 users": 1}
    assert driver.stats["scale then scale"].declined["intermediate has 2 users"] == 3


def test_alternatives_decline_once_per_root_with_the_first_reason():
    graph = graph_of("  %a: f32[-1,4] = scale(X=%x)\n  %b: f32[-1,4] = scale(X=%a)\n"
                     "  output %b")
    one = Pattern("one", (SECOND, FIRST), (guards.Never("first reason"),), fold)
    two = Pattern("two", (SECOND, FIRST), (guards.Never("second reason"),), fold)
    ctx, driver = run(graph, [one, two])
    assert dict(ctx.stats) == {"skipped: first reason": 1}
    assert driver.stats["two"].declined == {"second reason": 1}
    ctx, driver = run(graph, [one, AT_SECOND])  # a later alternative that fires: no decline
    assert dict(ctx.stats) == {"folded": 1}


def test_phases_run_in_order_each_over_a_fresh_snapshot():
    graph = graph_of(CHAIN)
    seen: list = []
    relabel = Pattern("see", (Node("s", "scale", ins={"X": "x"}),),
                      rewrite=lambda m, ctx: seen.append(m.s.attrs["scale"]))
    run(graph, [AT_SECOND], [relabel])
    assert seen == [3.0]  # the folded chain: 2 * 3 * 0.5


# -- a pass on the pattern layer keeps results ---------------------------------------------
@register_pass
class PatternFoldScale(Pass):
    """test-pattern-fold-scale: scale of scale folded through the pattern layer."""

    name: ClassVar[str] = "test-pattern-fold-scale"

    def run(self, graph, ctx) -> None:
        run_patterns(graph, ctx, [AT_SECOND])


@settings(max_examples=15)
@given(random_programs(steps=["scale", "activation"], min_ops=2, max_ops=5, with_loss=False))
def test_a_pattern_pass_keeps_interpreter_results(gen):
    check_pass(make_pass("test-pattern-fold-scale"), gen)


# -- patterns written by example ----------------------------------------------------------
X4 = {"x": ([-1, 4], "float32")}
RELU_RELU = pattern_from_example(lambda x: layers.relu(layers.relu(x)), X4, name="relu relu",
                                 replacement=lambda x: layers.relu(x), stat="folded")
X_PLUS_X = pattern_from_example(lambda x: layers.elementwise_add(x, x), X4, name="x+x",
                                replacement=lambda x: layers.scale(x, scale=2.0),
                                stat="doubled")


def test_an_example_names_its_nodes_and_values():
    assert [(n.name, n.type, dict(n.ins), dict(n.outs)) for n in RELU_RELU.nodes] == [
        ("relu_1", "relu", {"X": "relu_0_Out"}, {"Out": "out"}),
        ("relu_0", "relu", {"X": "x"}, {"Out": "relu_0_Out"})]
    assert [(n.name, dict(n.ins)) for n in X_PLUS_X.nodes] == [
        ("elementwise_add", {"X": "x", "Y": "x"})]


def test_an_example_pattern_rewrites_by_its_replacement_and_declines_shared_values():
    graph = graph_of("""  %a: f32[-1,4] = relu(X=%x)
  %b: f32[-1,4] = relu(X=%a)
  %c: f32[-1,4] = elementwise_add(X=%b, Y=%b)
  %d: f32[-1,4] = elementwise_add(X=%b, Y=%c)
  %e: f32[-1,4] = relu(X=%d)
  %f: f32[-1,4] = relu(X=%e)
  %g: f32[-1,4] = relu(X=%e)
  output %f
  output %g""")
    ctx, driver = run(graph, [RELU_RELU, X_PLUS_X])
    assert dict(ctx.stats) == {"folded": 1, "doubled": 1,
                               "skipped: intermediate has 2 users": 2}
    text = graph.to_text()
    assert "%b: f32[-1,4] = relu(X=%x)" in text  # the folded relu defines b, name kept
    assert "%c: f32[-1,4] = scale(X=%b) {scale=2.0}" in text
    assert driver.stats["relu relu"].rewritten == 1


def test_an_example_pattern_is_checked_when_made():
    with pytest.raises(PassError, match="exactly one"):
        pattern_from_example(lambda x: layers.relu(x), X4, name="p")
    with pytest.raises(PassError, match="compute its result"):
        pattern_from_example(lambda x: x, X4, name="p", rewrite=lambda m, ctx: None)
    with pytest.raises(PassError, match="compute every result"):
        pattern_from_example(lambda x: layers.relu(x), X4, name="p", replacement=lambda x: x)


@register_pass
class ExampleFolds(Pass):
    """test-example-folds: relu(relu(x)) -> relu(x) and x + x -> 2x, written by example."""

    name: ClassVar[str] = "test-example-folds"

    def run(self, graph, ctx) -> None:
        run_patterns(graph, ctx, [RELU_RELU, X_PLUS_X])


@settings(max_examples=15)
@given(random_programs(steps=["activation", "elementwise"], min_ops=2, max_ops=5,
                       with_loss=False))
def test_an_example_pattern_pass_keeps_interpreter_results(gen):
    check_pass(make_pass("test-example-folds"), gen)


# -- passes ask Graph, never its networkx maps ---------------------------------------------
def test_passes_read_the_graph_through_public_queries():
    """No pass reads Graph's adjacency maps or calls its low-level edits (or the
    Rewriter's event hook): queries go through Graph's public methods, edits through the
    Rewriter."""
    root = Path(__file__).resolve().parent.parent / "graphc" / "passes"
    private = re.compile(r"\.nx\b|\bgraph\._[a-z]|\._(succ|pred|new_var|new_value|new_op|"
                         r"connect|disconnect|touch|versions|outputs_version|emit)\b")
    offenders = {str(p.relative_to(root)): m.group(0)
                 for p in sorted(root.rglob("*.py"))
                 if (m := private.search(p.read_text()))}
    assert not offenders, offenders
