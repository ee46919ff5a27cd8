"""Regions and passes (issue 26): the verifier checks bodies and scoping, every pass declares
what it does inside regions, recursing passes rewrite bodies with results unchanged, and
declining ones say why in their statistics."""

from __future__ import annotations

import numpy as np
import pytest
from test_pass_completeness import graphc_passes

from graphc.backends.interpreter import run_graph
from graphc.ir.errors import ParseError, ProgramError, VerifyError
from graphc.ir.text import parse
from graphc.passes import PassManager, all_passes, make_pass
from graphc.passes.infra.base import Pass
from graphc.passes.infra.regions import DECLINE, IN_REGIONS, MODES, RECURSE, region_ops
from graphc.testing import assert_same_results

# x -> [region: m = x*w, a = m + b, h = relu(a), dead = exp(m)] -> y = the last iteration's h
BODY = """    input %x: f32[-1,3] {feed}
    input %w: f32[3,3] {feed}
    input %b: f32[3] {feed}
    %m: f32[-1,3] = mul(X=%x, Y=%w)
    %a: f32[-1,3] = elementwise_add(X=%m, Y=%b) {axis=1}
    %h: f32[-1,3] = relu(X=%a)
    %dead: f32[-1,3] = exp(X=%m)
    output %h"""


def program(body: str = BODY, after: str = "") -> str:
    return f"""graph @main {{
  input %x: f32[-1,3] {{feed}}
  input %w: f32[3,3] {{param}}
  input %b: f32[3] {{param}}
  (Ys=[%h.steps: f32[2,-1,3]]) = scan_layers(Consts=[%x, %w, %b]) {{iterations=2}} body @body {{
{body}
  }}
  %y: f32[-1,3] = slice(Input=%h.steps) {{axes=[0], starts=[1], ends=[2], decrease_axis=[0]}}
{after}  output %w
}}
"""


PLAIN = """graph @main {
  input %x: f32[-1,3] {feed}
  %y: f32[-1,3] = relu(X=%x)
  output %x
}"""
STATE = {"w": np.arange(9, dtype="float32").reshape(3, 3) / 9 - 0.4,
         "b": np.array([0.1, -0.2, 0.3], dtype="float32")}
FEEDS = {"x": np.linspace(-1, 1, 12, dtype="float32").reshape(4, 3)}


def run(names, text: str = None, keep=("y",)):
    """(graph before, graph after, stats) of a verified pipeline over ``text``."""
    before, after = parse(text or program()), parse(text or program())
    before.verify()
    report = PassManager([make_pass(n) for n in names], verify_each=True).run(
        after, keep=[after.value(k) for k in keep])
    return before, after, report.stats()


def body_of(graph, index: int = 0):
    return parse(region_ops(graph)[index].attrs["body"])


# -- the verifier ---------------------------------------------------------------------------
def test_a_valid_program_with_a_region_verifies_and_round_trips():
    g = parse(program())
    g.verify()
    assert parse(g.to_text()).structurally_equal(g)


def test_an_outer_op_reading_a_body_value_is_refused_with_the_reason():
    text = program(after="  %z: f32[-1,3] = tanh(X=%h)\n")
    with pytest.raises(ParseError) as info:
        parse(text)
    message = str(info.value)
    assert "'%h' is defined inside region 'body' of op scan_layers" in message
    assert "only through the op's results" in message


def test_a_body_reading_an_outer_value_it_does_not_take_as_input_names_the_op_and_region():
    body = BODY.replace("    input %b: f32[3] {feed}\n", "")
    text = program(body).replace("Consts=[%x, %w, %b]", "Consts=[%x, %w]")
    with pytest.raises(VerifyError) as info:
        parse(text).verify()
    message = str(info.value)
    assert "op scan_layers" in message and "region 'body' does not verify" in message
    assert "'%b' is used before it is defined" in message


def test_a_body_that_does_not_verify_names_the_op_and_region():
    bad = BODY.replace("%h: f32[-1,3] = relu(X=%a)", "%h: f32[-1,4] = relu(X=%a)")
    with pytest.raises(VerifyError) as info:
        parse(program(bad)).verify()
    assert "region 'body' does not verify" in str(info.value)
    assert "op scan_layers" in str(info.value) and "shape mismatch" in str(info.value)


def test_a_region_holds_no_state():
    stateful = BODY.replace("input %w: f32[3,3] {feed}", "input %w: f32[3,3] {param}")
    with pytest.raises(VerifyError, match=r"region 'body' declares state \['w'\]"):
        parse(program(stateful)).verify()


def nested(inner_body: str) -> str:
    """The region's body holds a region of its own (one iteration of ``inner_body``)."""
    inner = "\n".join("    " + ln for ln in inner_body.splitlines())
    body = f"""    input %x: f32[-1,3] {{feed}}
    input %w: f32[3,3] {{feed}}
    input %b: f32[3] {{feed}}
    (Ys=[%h.inner: f32[1,-1,3]]) = scan_layers(Consts=[%x, %w, %b]) {{iterations=1}} body @inner {{
{inner}
    }}
    %h: f32[-1,3] = slice(Input=%h.inner) {{axes=[0], starts=[0], ends=[1], decrease_axis=[0]}}
    %dead_outer: f32[-1,3] = tanh(X=%h)
    output %h"""
    return program(body)


def test_nested_regions_verify_recursively():
    g = parse(nested(BODY))
    g.verify()
    assert parse(g.to_text()).structurally_equal(g)
    bad = BODY.replace("%h: f32[-1,3] = relu(X=%a)", "%h: f32[-1,4] = relu(X=%a)")
    with pytest.raises(VerifyError, match="region 'body' does not verify.*region 'body' does "
                                          "not verify"):
        parse(nested(bad)).verify()


# -- every pass says what it does inside regions --------------------------------------------
def test_every_pass_declares_its_region_behaviour():
    """Each graphc pass sets ``regions`` itself (not left to the base class), and a pass that
    declines gives its reason."""
    problems = []
    for name in graphc_passes():
        cls = all_passes()[name]
        declared = any("regions" in vars(c) for c in cls.__mro__ if c is not Pass)
        if not declared or cls.regions not in MODES:
            problems.append(f"{name}: regions = {cls.regions!r}, expected one of {MODES}")
        elif cls.regions == DECLINE and len(cls.regions_reason) < 20:
            problems.append(f"{name}: declines regions without a reason")
    assert not problems, "passes without a region behaviour:\n  " + "\n  ".join(problems)
    modes = {name: all_passes()[name].regions for name in graphc_passes()}
    assert {n for n, m in modes.items() if m == RECURSE} >= {
        "dce", "fuse-elewise-add-act", "fuse-bn-act", "fuse-relu-depthwise-conv"}
    assert all(modes[n] == DECLINE for n in modes if n.startswith("ps-") or n in (
        "data-parallel", "amp", "enable-inplace", "memory-optimize"))


@pytest.mark.parametrize("name", ["data-parallel", "enable-inplace", "amp", "ps-slice-variables"])
def test_declining_passes_say_why_once_per_region_op(name):
    _, after, stats = run([name])
    reason = all_passes()[name].regions_reason
    assert stats[name][f"skipped: inside regions: {reason}"] == 1
    assert body_of(after).structurally_equal(body_of(parse(program())))
    _, _, plain = run([name], PLAIN)
    assert not any("inside regions" in k for k in plain[name])  # no regions, nothing said


# -- passes inside bodies --------------------------------------------------------------------
def test_dce_removes_dead_body_ops_and_keeps_the_results():
    before, after, stats = run(["dce"])
    assert stats["dce"] == {"removed" + IN_REGIONS: 1}
    body = body_of(after)
    assert body.stats() == {"mul": 1, "elementwise_add": 1, "relu": 1}
    assert len(body.inputs) == 3  # the op's operands stay, read or not
    assert_same_results(before, after, STATE, FEEDS, ["y"], rtol=0, atol=0)


def test_dce_keeps_every_operand_the_body_reads_even_when_unused_inside():
    body = BODY.replace("%a: f32[-1,3] = elementwise_add(X=%m, Y=%b) {axis=1}",
                        "%a: f32[-1,3] = scale(X=%m) {scale=2.0}")
    text = program(body).replace("Consts=[%x, %w, %b]", "Consts=[%x, %w, %b2]").replace(
        "  (Ys=", "  %b2: f32[3] = relu(X=%b)\n  (Ys=")
    _, after, stats = run(["dce"], text)
    assert "relu" in after.stats() and len(body_of(after).inputs) == 3


def test_dce_recurses_into_nested_regions():
    before, after, stats = run(["dce"], nested(BODY))
    assert stats["dce"] == {"removed" + IN_REGIONS: 2}  # tanh in the body, exp in its body
    outer = body_of(after)
    assert outer.stats() == {"scan_layers": 1, "slice": 1}
    assert body_of(outer).stats() == {"mul": 1, "elementwise_add": 1, "relu": 1}
    assert_same_results(before, after, STATE, FEEDS, ["y"], rtol=0, atol=0)


def test_dce_keeps_a_dead_region_op_whose_body_calls_the_host():
    body = BODY.replace("%dead: f32[-1,3] = exp(X=%m)", "%dead: f32[-1,3] = print(In=%m)")
    text = program(body).replace(
        "  %y: f32[-1,3] = slice", "  %y: f32[-1,3] = relu(X=%x)\n  %unused: f32[-1,3] = slice")
    _, after, stats = run(["dce"], text)
    assert after.stats()["scan_layers"] == 1 and "slice" not in after.stats()
    assert stats["dce"]["skipped: region with a collective op or host callback"] == 1
    assert "print" in body_of(after).stats()  # the host call inside is kept too


def test_a_dead_region_op_goes_as_a_whole():
    text = program().replace("  %y: f32[-1,3] = slice",
                             "  %y: f32[-1,3] = relu(X=%x)\n  %unused: f32[-1,3] = slice")
    _, after, stats = run(["dce"], text)
    assert after.stats() == {"relu": 1} and stats["dce"] == {"removed": 2}


def test_fusion_inside_a_body_keeps_results():
    before, after, stats = run(["fuse-elewise-add-act"], keep=("y",))
    body = body_of(after)
    assert "fused_elemwise_activation" in body.stats() and "relu" not in body.stats()
    assert any(k.endswith(IN_REGIONS) for k in stats["fuse-elewise-add-act"])
    assert_same_results(before, after, STATE, FEEDS, ["y"], rtol=1e-6, atol=1e-6)


def test_body_rewrites_go_through_the_outer_rewriter():
    g = parse(program())
    events = []
    g.listeners.append(lambda kind, info: events.append((kind, info.get("name"))))
    PassManager([make_pass("dce")], verify_each=True).run(g, keep=[g.value("y")])
    assert ("set_attr", "body") in events


def test_amp_keeps_a_region_op_float32():
    text = program(after="").replace(
        "Consts=[%x, %w, %b]", "Consts=[%x2, %w, %b]").replace(
        "  (Ys=", "  %x2: f32[-1,3] = mul(X=%x, Y=%w)\n  (Ys=")
    _, after, stats = run(["amp"], text)
    scan = region_ops(after)[0]
    assert all(v.dtype == "float32" for v in scan.input_values())
    assert "bfloat16" not in scan.attrs["body"]
    assert after.stats()["cast"] >= 2  # mul went low and was cast back for the region op


def test_results_agree_after_every_recursing_pass():
    for name in [n for n in graphc_passes() if all_passes()[n].regions == RECURSE]:
        before, after, _ = run([name], nested(BODY))
        assert run_graph(after, STATE, FEEDS, ["y"])[1][0].shape == (4, 3)
        assert_same_results(before, after, STATE, FEEDS, ["y"], rtol=1e-6, atol=1e-6)


def test_the_rewriter_refuses_a_body_that_does_not_verify():
    g = parse(program())
    scan = region_ops(g)[0]
    broken = scan.attrs["body"].replace("relu(X=%a)", "relu(X=%nowhere)")
    with pytest.raises(ProgramError, match="op scan_layers: region 'body' does not verify"):
        g.rewriter().set_attr(scan, "body", broken)
    assert scan.attrs["body"] != broken  # nothing changed


def test_a_region_op_the_pass_made_is_not_declined_by_that_pass():
    """roll-repeated-layers makes scan_layers ops; the next pass declines inside them."""
    import graphc as fluid
    from graphc import layers
    from graphc.ir import lower, program_guard, unique_name
    main, startup = fluid.Program(), fluid.Program()
    with program_guard(main, startup), unique_name.guard():
        h = fluid.data("x", [-1, 3])
        for _ in range(4):
            h = layers.fc(h, 3, act="tanh")
    g = lower(main)
    report = PassManager([make_pass("roll-repeated-layers"), make_pass("data-parallel",
                                                                      nranks=2)],
                         verify_each=True).run(g, keep=[g.latest(h.name)])
    stats = report.stats()
    assert not any("inside regions" in k for k in stats["roll-repeated-layers"])
    assert any("inside regions" in k for k in stats["data-parallel"])


def while_program(train: bool):
    """h <- tanh(fc(h)) * 0.5 + x three times in a While loop, with exp(h) computed for
    nobody inside the body; trained with SGD through the loop when ``train``."""
    import graphc as fluid
    from graphc import layers, optimizer
    from graphc.ir import program_guard, unique_name
    main, startup = fluid.Program(), fluid.Program()
    with program_guard(main, startup), unique_name.guard():
        x = fluid.data("x", [-1, 3])
        h = layers.scale(x, 1.0)
        i = layers.fill_constant([1], "int64", 0)
        n = layers.fill_constant([1], "int64", 3)
        cond = layers.less_than(i, n)
        loop = layers.While(cond)
        with loop.block():
            h2 = layers.elementwise_add(layers.tanh(layers.fc(h, 3)), x)
            layers.exp(h2)
            layers.assign(h2, h)
            layers.increment(i)
            layers.less_than(i, n, cond=cond)
        loss = layers.mean(h)
        if train:
            optimizer.SGD(0.1).minimize(loss)
    return main, startup, loss


@pytest.mark.parametrize("train", [False, True])
def test_passes_inside_a_while_body_keep_results(train):
    from graphc.ir import lower
    main, startup, loss = while_program(train)
    state, _ = run_graph(lower(startup))
    fetch = [loss.name] + (["fc_0.w_0", "fc_0.b_0"] if train else [])
    before, after = lower(main), lower(main)
    report = PassManager([make_pass("dce"), make_pass("fuse-elewise-add-act")],
                         verify_each=True).run(after, keep=[after.latest(loss.name)])
    stats = report.stats()
    assert stats["dce"]["removed" + IN_REGIONS] >= 1  # exp inside the body (and its grad's)
    loops = [op for op in after.ops() if op.type in ("while", "while_grad")]
    assert len(loops) == (2 if train else 1)
    for op in loops:
        assert "exp" not in parse(op.attrs["body"]).stats()
    assert "fused_elemwise_activation" in parse(loops[0].attrs["body"]).stats()
    assert_same_results(before, after, state, {"x": FEEDS["x"]}, fetch, rtol=1e-5,
                        atol=1e-6)


def test_data_parallel_exchanges_gradients_around_a_loop():
    """The parameters read inside a While body get their gradients from while_grad, as from
    any op: data-parallel all-reduces them after it and leaves the bodies alone."""
    from graphc.ir import lower
    main, _, loss = while_program(train=True)
    g = lower(main)
    bodies = [op.attrs["body"] for op in region_ops(g)]
    report = PassManager([make_pass("data-parallel", nranks=2)], verify_each=True).run(
        g, keep=[g.latest(loss.name)])
    reduced = {op.input("X").var.name for op in g.ops() if op.type == "c_allreduce"}
    assert {"fc_0.w_0@GRAD", "fc_0.b_0@GRAD"} <= reduced
    grad_loop = next(op for op in g.ops() if op.type == "while_grad")
    for op in g.ops():
        if op.type == "c_allreduce" and op.input("X").var.name.startswith("fc_0"):
            assert g.ops().index(op) > g.ops().index(grad_loop)
    assert [op.attrs["body"] for op in region_ops(g)] == bodies
    reason = all_passes()["data-parallel"].regions_reason
    assert report.stats()["data-parallel"][f"skipped: inside regions: {reason}"] == 2
