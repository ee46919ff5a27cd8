"""Stacked state (roll-repeated-layers' @STACK variables) in a Scope: answered by Paddle name,
written through, split for programs compiled without the pass, checkpoints in either form."""

from __future__ import annotations

import numpy as np
import pytest

import graphc
from graphc import layers, optimizer
from graphc.ir import program_guard, unique_name
from graphc.ir.errors import GraphcError
from graphc.ir.text import parse
from graphc.runtime import checkpoint


def deep(k=5, size=3, opt="momentum", first=None):
    main, startup = graphc.Program(), graphc.Program()
    with program_guard(main, startup), unique_name.guard():
        h = layers.data("x", [first or size])
        for _ in range(k):
            h = layers.fc(h, size, act="tanh")
        loss = layers.mean(h)
        test = main.clone(for_test=True)
        {"sgd": lambda: optimizer.SGD(0.1),
         "momentum": lambda: optimizer.Momentum(0.1, 0.9)}[opt]().minimize(loss)
    return main, startup, test, loss


def feeds(n, seed=0):
    rng = np.random.default_rng(seed)
    return [{"x": rng.uniform(-1, 1, (4, 3)).astype("float32")} for _ in range(n)]


def compiled(main, roll):
    return graphc.CompiledProgram(main, build_strategy=graphc.BuildStrategy(
        roll_repeated_layers=roll))


def persistable_names(main):
    return sorted(v.name for v in main.list_vars() if v.persistable)


def snapshot(scope, main):
    return {n: np.asarray(scope.find_var(n).get_tensor()) for n in persistable_names(main)}


def assert_same(got, want):
    assert got.keys() == want.keys()
    for n in want:
        np.testing.assert_allclose(got[n], want[n], rtol=1e-6, atol=1e-6, err_msg=n)


def test_rolled_training_keeps_names_and_values():
    main, startup, _, loss = deep()
    results = {}
    for roll in (False, True):
        scope, exe = graphc.Scope(), graphc.Executor()
        exe.run(startup, scope=scope)
        cp = compiled(main, roll)
        losses = [exe.run(cp, feed=f, fetch_list=[loss], scope=scope)[0] for f in feeds(3)]
        results[roll] = losses, snapshot(scope, main), scope, cp
    assert_same(results[True][1], results[False][1])
    np.testing.assert_allclose(results[True][0], results[False][0], rtol=1e-6, atol=1e-6)
    scope, cp = results[True][2], results[True][3]
    stats = cp.last_report.stats()["roll-repeated-layers"]
    assert stats["stacked state families"] >= 4  # w, b and their velocities
    # the scope holds stacks, yet lists and answers every member by its Paddle name only
    assert any("@STACK" in n for n in scope._vars)
    assert sorted(scope.keys()) == sorted(results[False][2].keys())
    assert not any("@STACK" in n for n in scope.keys())
    assert len(scope) == len(results[False][2])
    assert "fc_2.w_0" in scope and scope.find_var("fc_2.w_0") is not None
    assert scope.find_var("fc_2.w_0").get_tensor().shape() == [3, 3]


def test_unrolled_program_reads_members_then_rolled_training_resumes():
    main, startup, test, loss = deep()
    fs = feeds(4)
    want_scope, want_exe = graphc.Scope(), graphc.Executor()
    scope, exe = graphc.Scope(), graphc.Executor()
    want_exe.run(startup, scope=want_scope)
    exe.run(startup, scope=scope)
    plain, cp = compiled(main, False), compiled(main, True)
    for i, f in enumerate(fs):
        want_exe.run(plain, feed=f, fetch_list=[loss], scope=want_scope)
        exe.run(cp, feed=f, fetch_list=[loss], scope=scope)
        # the test program (no passes) reads the members from the same scope
        want = want_exe.run(test, feed=f, fetch_list=[loss.name], scope=want_scope)[0]
        got = exe.run(test, feed=f, fetch_list=[loss.name], scope=scope)[0]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"step {i}")
    assert_same(snapshot(scope, main), snapshot(want_scope, main))


def test_write_by_name_lands_in_the_stack():
    main, startup, _, loss = deep(opt="sgd")
    fs = feeds(2)
    out = []
    for roll in (False, True):
        scope, exe = graphc.Scope(), graphc.Executor()
        exe.run(startup, scope=scope)
        cp = compiled(main, roll)
        exe.run(cp, feed=fs[0], fetch_list=[loss], scope=scope)
        new = np.full((3, 3), 0.25, "float32")
        scope["fc_3.w_0"] = new
        np.testing.assert_array_equal(scope["fc_3.w_0"], new)
        scope.find_var("fc_1.b_0").get_tensor().set(np.ones(3, "float32"))
        exe.run(cp, feed=fs[1], fetch_list=[loss], scope=scope)
        out.append(snapshot(scope, main))
        if roll:
            assert any("@STACK" in n for n in scope._vars)  # written in place, not split
    assert_same(out[1], out[0])


def test_write_of_another_shape_splits_and_the_step_names_the_member():
    main, startup, _, loss = deep(opt="sgd")
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    cp = compiled(main, True)
    exe.run(cp, feed=feeds(1)[0], fetch_list=[loss], scope=scope)
    scope["fc_2.w_0"] = np.zeros((2, 3), "float32")
    assert scope["fc_2.w_0"].shape == (2, 3)
    assert not any("@STACK" in n for n in scope._vars if "fc_0.w_0" in n)
    with pytest.raises(GraphcError, match=r"'fc_2\.w_0'.*row 2 of stacked state"):
        exe.run(cp, feed=feeds(1)[0], fetch_list=[loss], scope=scope)


def test_rerunning_startup_resets_stacked_parameters():
    """The startup runner writes by name into the scope's dict: the values land in the
    stacks' rows, as an unrolled scope gets them."""
    main, startup, _, loss = deep(opt="sgd")
    out = []
    for roll in (False, True):
        scope, exe = graphc.Scope(), graphc.Executor()
        exe.run(startup, scope=scope)
        cp = compiled(main, roll)
        exe.run(cp, feed=feeds(1)[0], fetch_list=[loss], scope=scope)
        exe.run(startup, scope=scope)
        out.append(snapshot(scope, main))
        exe.run(cp, feed=feeds(1)[0], fetch_list=[loss], scope=scope)
        out.append(snapshot(scope, main))
    assert_same(out[2], out[0])
    assert_same(out[3], out[1])


@pytest.mark.parametrize("save_roll,load_roll", [(True, False), (False, True), (True, True)])
def test_checkpoints_by_name_either_way(tmp_path, save_roll, load_roll):
    main, startup, _, loss = deep()
    fs = feeds(3)
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    exe.run(compiled(main, save_roll), feed=fs[0], fetch_list=[loss], scope=scope)
    path = checkpoint.save(main, str(tmp_path), scope)
    saved = checkpoint.read_tensors(path)
    assert sorted(saved) == persistable_names(main)  # by Paddle name, never @STACK
    want = [exe.run(compiled(main, save_roll), feed=f, fetch_list=[loss], scope=scope)[0]
            for f in fs[1:]]
    fresh = graphc.Scope()
    exe.run(startup, scope=fresh)
    if load_roll:  # the fresh scope already holds stacks: loading writes into their rows
        exe.run(compiled(main, True), feed=fs[0], fetch_list=[loss], scope=fresh)
    checkpoint.load(main, str(tmp_path), fresh)
    got = [exe.run(compiled(main, load_roll), feed=f, fetch_list=[loss], scope=fresh)[0]
           for f in fs[1:]]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert_same(snapshot(fresh, main), snapshot(scope, main))


def test_stack_of_prints_parses_and_is_checked():
    text = """graph @g {
  input %w@STACK2: f32[2,3] {param, stack_of=["w", "v"]}
  %y: f32[2,3] = scale(X=%w@STACK2) {scale=2.0}
  output %y
}
"""
    g = parse(text)
    assert g.vars["w@STACK2"].extra["stack_of"] == ("w", "v")
    assert g.to_text() == parse(g.to_text()).to_text()
    assert 'stack_of=["w", "v"]' in g.to_text()
    for bad in ('stack_of=["w", "w"]', "stack_of=[]", "stack_of=3"):
        with pytest.raises(GraphcError, match="stack_of"):
            parse(text.replace('stack_of=["w", "v"]', bad))


def test_verifier_checks_stacked_state():
    from graphc.ir.errors import VerifyError
    good = """graph @g {
  input %w@STACK2: f32[2,3] {param, stack_of=["w", "v"]}
  %y: f32[2,3] = scale(X=%w@STACK2) {scale=2.0}
  output %y
}
"""
    parse(good).verify()
    with pytest.raises(VerifyError, match="one row per member"):
        parse(good.replace('["w", "v"]', '["w", "v", "u"]')).verify()
    with pytest.raises(VerifyError, match="one row per member"):
        parse(good.replace('stack_of=["w", "v"]', 'stack_of=["w", "y"]')).verify()


def test_stacking_does_not_make_the_step_compile_twice():
    """Stacks the runtime builds are placed as the step's own outputs are, so the second
    run finds the compiled step for the same argument placement (the first layer's own
    parameters, not stacked, are updated too)."""
    main, startup, _, loss = deep(k=6, opt="sgd", first=4)
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    cp = compiled(main, True)
    x = np.random.default_rng(0).uniform(-1, 1, (4, 4)).astype("float32")
    for _ in range(3):
        exe.run(cp, feed={"x": x}, fetch_list=[loss], scope=scope)
    step = exe.compile(cp, feed={"x": x}, fetch_list=[loss])
    assert any("@STACK" in n for n in step.state_names)
    assert step.traces == 1


def test_delete_by_name_splits_the_stack():
    main, startup, _, loss = deep(opt="sgd")
    scope, exe = graphc.Scope(), graphc.Executor()
    exe.run(startup, scope=scope)
    exe.run(compiled(main, True), feed=feeds(1)[0], fetch_list=[loss], scope=scope)
    keep = scope["fc_3.w_0"]
    stack = next(n for n in scope._vars if n.startswith("fc_0.w_0@STACK"))
    del scope["fc_1.w_0"]
    assert "fc_1.w_0" not in scope and "fc_1.w_0" not in scope.keys()
    np.testing.assert_array_equal(scope["fc_3.w_0"], keep)
    with pytest.raises(GraphcError, match=r"'fc_1\.w_0' \(row 1 of stacked state"):
        exe.run(compiled(main, True), feed=feeds(1)[0], fetch_list=[loss], scope=scope)
    scope["fc_1.w_0"] = np.zeros((3, 3), "float32")
    exe.run(compiled(main, True), feed=feeds(1)[0], fetch_list=[loss], scope=scope)
    assert stack in scope._vars
    del scope[stack]  # the stack goes, its members stay by name
    assert stack not in scope._vars and "fc_1.w_0" in scope._vars
    assert {"fc_0.w_0", "fc_4.w_0", "fc_2.b_0"} <= set(scope.keys())
    assert not any("@STACK" in n for n in scope.keys())
