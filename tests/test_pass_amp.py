"""amp: golden cast placement (MLP, small conv net), overflow skipping with bit-identical
state and the documented scale schedule, 50-step training against float32, random programs
within bf16 tolerance, strategy plumbing and typed errors."""

from __future__ import annotations

from pathlib import Path

import graphc.amp
import numpy as np
import pytest
from hypothesis import assume, given, settings

import graphc
from graphc import layers, models, optimizer
from graphc.backends.interpreter import run_graph
from graphc.ir import lower, parse
from graphc.ops.amp.defs import BAD_STEPS, FOUND_INFINITE, GOOD_STEPS, LOSS_SCALING
from graphc.passes import PassError, PassManager, make_pass, passes_for
from graphc.strategy import AmpConfigs, BuildStrategy, StrategyError
from graphc.testing import check_golden, feeds_for, random_programs

GOLDEN = Path(__file__).parent / "golden" / "amp"


def apply_amp(graph, keep=(), **options):
    report = PassManager([make_pass("amp", **options)], verify_each=True).run(graph, keep=keep)
    return report.stats()["amp"]


def golden_text(before, after, stats) -> str:
    return "\n".join(["# pass: amp",
                      "# stats: " + ", ".join(f"{k}: {v}" for k, v in sorted(stats.items())),
                      "# --- before", before.to_text().rstrip(), "# --- after",
                      after.to_text()])


def small_mlp(opt=None):
    m = models.mlp(8, (6,), 3, batch_norm=False)
    with graphc.program_guard(m.main, m.startup):
        (opt or optimizer.SGD(0.1)).minimize(m.loss)
    return m


def small_cnn(opt=None):
    m = models.demo_cnn((1, 8, 8), 3, (2, 4))
    with graphc.program_guard(m.main, m.startup):
        (opt or optimizer.SGD(0.1)).minimize(m.loss)
    return m


# -- golden cast placement ----------------------------------------------------------------

@pytest.mark.parametrize("name,build", [("mlp", small_mlp), ("cnn", small_cnn)])
def test_golden_cast_placement(name, build):
    m = build(optimizer.Momentum(0.1, 0.9))
    before, after = lower(m.main), lower(m.main)
    stats = apply_amp(after)
    check_golden(GOLDEN / f"{name}.ir", golden_text(before, after, stats))
    assert parse(after.to_text()).structurally_equal(after)  # the new ops round-trip
    ops = after.ops()
    casts = [(op.input("X"), op.attrs["out_dtype"]) for op in ops if op.type == "cast"]
    assert len(casts) == len(set(casts))  # one cast per (value, dtype)
    for op in ops:  # no cast reads a cast that it undoes exactly
        if op.type == "cast":
            p = op.input("X").producer
            assert not (p is not None and p.type == "cast"
                        and p.attrs["in_dtype"] == op.attrs["out_dtype"])
    low = {op.type for op in ops if any(v.dtype == "bfloat16" for v in op.output_values())}
    assert {"mul", "conv2d" if name == "cnn" else "mul", "mul_grad"} <= low
    for op in ops:  # black ops and the optimizer stay float32; master weights are float32
        if op.type in ("softmax_with_cross_entropy", "mean", "mean_grad", "momentum"):
            assert all(v.dtype != "bfloat16" for v in op.input_values() + op.output_values())
    assert all(v.dtype in ("float32", "int32") for v in after.outputs)
    if name == "cnn":  # batch_norm runs on bf16 X with float32 statistics
        for bn in [op for op in ops if op.type == "batch_norm"]:
            assert bn.input("X").dtype == "bfloat16" and bn.input("Scale").dtype == "float32"
            assert bn.output("MeanOut").dtype == "float32"


def test_forward_only_graph_gets_casts_but_no_loss_scaling():
    x = layers.data("x", [-1, 4], "float32")
    out = layers.fc(x, 3, act="relu")
    graph = lower(graphc.default_main_program())
    stats = apply_amp(graph, keep=[graph.latest(out.name)])
    assert stats["skipped: loss scaling: no optimizer ops"] == 1
    assert LOSS_SCALING not in graph.vars
    assert graph.latest(out.name).dtype == "float32"  # the fetched value keeps its type


def test_float64_ops_are_left_alone():
    x = layers.data("x", [-1, 4], "float64")
    out = layers.fc(x, 3)
    graph = lower(graphc.default_main_program())
    stats = apply_amp(graph, keep=[graph.latest(out.name)])
    assert stats["skipped: mul: float64 operands"] == 1
    assert not any(op.type == "cast" for op in graph.ops())


def test_custom_lists_move_ops():
    m = small_mlp()
    graph = lower(m.main)
    apply_amp(graph, custom_black_list=["mul"], custom_white_list=["softmax_with_cross_entropy"])
    types = {op.type: op for op in graph.ops()}
    assert types["mul"].output("Out").dtype == "float32"
    assert types["softmax_with_cross_entropy"].output("Loss").dtype == "bfloat16"


# -- running: overflow skipping and the scale schedule ------------------------------------

class Trainer:
    """A small MLP trained through CompiledProgram with the amp pass (Executor, XLA)."""

    def __init__(self, opt, **configs):
        self.m = small_mlp(opt)
        bs = BuildStrategy(amp=True, amp_configs=configs)
        graphc.amp.init_state(self.m.startup, bs)
        # the strategy's options reach the pass as BuildStrategy.pass_options says
        passes = [make_pass("dce"), make_pass("amp", **bs.pass_options("amp"))]
        self.compiled = graphc.CompiledProgram(self.m.main, pass_manager=PassManager(passes))
        self.exe, self.scope = graphc.Executor(), graphc.Scope()
        self.exe.run(self.m.startup, scope=self.scope)
        self.rng = np.random.default_rng(0)

    def step(self, overflow=False):
        x = self.rng.uniform(-1, 1, (4, 8)).astype("float32")
        if overflow:
            x[0, 0] = np.inf  # the gradients of the first layer's weight become inf/nan
        label = self.rng.integers(0, 3, (4, 1)).astype("int64")
        loss, scale, found, good, bad = self.exe.run(
            self.compiled, feed={"x": x, "label": label}, scope=self.scope,
            fetch_list=[self.m.loss, LOSS_SCALING, FOUND_INFINITE, GOOD_STEPS, BAD_STEPS])
        return float(scale[0]), bool(found[0]), int(good[0]), int(bad[0])

    def state(self):
        skip = {LOSS_SCALING, GOOD_STEPS, BAD_STEPS}
        return {n: np.array(self.scope[n]) for n in self.scope.keys() if n not in skip}


@pytest.mark.parametrize("opt", [optimizer.SGD(0.1), optimizer.Momentum(0.1, 0.9),
                                 optimizer.Adam(0.01)], ids=["sgd", "momentum", "adam"])
def test_overflow_skips_the_step_and_the_scale_follows_the_schedule(opt):
    t = Trainer(opt, init_loss_scaling=1024.0, decr_every_n_nan_or_inf=2, decr_ratio=0.5)
    assert t.step() == (1024.0, False, 1, 0)
    before = t.state()
    assert t.step(overflow=True) == (1024.0, True, 0, 1)  # first bad step: scale kept
    after = t.state()
    assert before.keys() == after.keys() and len(before) > 4
    for name in before:  # parameters, accumulators, beta powers: bit-identical
        assert before[name].tobytes() == after[name].tobytes(), name
    assert t.step(overflow=True) == (512.0, True, 0, 0)  # second in a row: scale * 0.5
    assert t.state().keys() == before.keys()
    for name, value in t.state().items():
        assert value.tobytes() == before[name].tobytes(), name
    assert t.step() == (512.0, False, 1, 0)  # a finite step updates again
    assert any(t.state()[n].tobytes() != before[n].tobytes() for n in before)


def test_scale_grows_after_incr_every_n_steps_good_steps():
    t = Trainer(optimizer.SGD(0.1), init_loss_scaling=8.0, incr_every_n_steps=3)
    assert [t.step() for _ in range(4)] == [(8.0, False, 1, 0), (8.0, False, 2, 0),
                                            (16.0, False, 0, 0), (16.0, False, 1, 0)]
    assert t.step(overflow=True) == (16.0, True, 0, 1)  # a bad step resets the good count
    assert t.step() == (16.0, False, 1, 0)  # and a good one the bad count


def test_scale_never_drops_below_one_and_static_scaling_keeps_it():
    t = Trainer(optimizer.SGD(0.1), init_loss_scaling=1.5, decr_every_n_nan_or_inf=1,
                decr_ratio=0.5)
    assert t.step(overflow=True) == (1.0, True, 0, 0)
    s = Trainer(optimizer.SGD(0.1), init_loss_scaling=4.0, use_dynamic_loss_scaling=False)
    before = s.state()
    loss, scale, found = s.exe.run(
        s.compiled, scope=s.scope, fetch_list=[s.m.loss, LOSS_SCALING, FOUND_INFINITE],
        feed={"x": np.full((4, 8), np.inf, "float32"), "label": np.zeros((4, 1), "int64")})
    assert (float(scale[0]), bool(found[0])) == (4.0, True)
    assert all(s.state()[n].tobytes() == v.tobytes() for n, v in before.items())
    graph = s.compiled.graph([s.m.loss])  # static scaling: no schedule, no counters read
    assert "update_loss_scaling" not in graph.stats() and GOOD_STEPS not in graph.vars


def test_state_the_pass_creates_starts_at_its_initial_value():
    """Without graphc.amp.init_state the runtime fills the loss scale and its counters from
    the initial values the pass recorded (Rewriter.new_state), then trains as usual."""
    m = small_mlp()
    passes = PassManager([make_pass("amp", init_loss_scaling=64.0)])
    exe, scope = graphc.Executor(), graphc.Scope()
    exe.run(m.startup, scope=scope)  # graphc.amp.init_state was not called
    assert LOSS_SCALING not in scope
    scale, good = exe.run(
        graphc.CompiledProgram(m.main, pass_manager=passes), scope=scope,
        feed={"x": np.zeros((2, 8), "float32"), "label": np.zeros((2, 1), "int64")},
        fetch_list=[LOSS_SCALING, GOOD_STEPS])
    assert float(scale[0]) == 64.0 and int(good[0]) == 1
    assert float(scope[LOSS_SCALING][0]) == 64.0 and int(scope[BAD_STEPS][0]) == 0


# -- training: amp reaches float32's loss -------------------------------------------------

def _train(build, amp: bool, steps=50, batch=32):
    from sklearn.datasets import load_digits
    digits = load_digits()
    images = (digits.images / 16.0).astype("float32")
    labels = digits.target.astype("int64").reshape(-1, 1)
    m = build()
    with graphc.program_guard(m.main, m.startup):
        optimizer.SGD(0.1).minimize(m.loss)
    bs = BuildStrategy(amp=amp)
    passes = [make_pass("dce")]
    if amp:
        graphc.amp.init_state(m.startup, bs)
        passes.append(make_pass("amp", **bs.pass_options("amp")))
    exe, scope = graphc.Executor(), graphc.Scope()
    exe.run(m.startup, scope=scope)
    compiled = graphc.CompiledProgram(m.main, pass_manager=PassManager(passes))
    shape = [-1] + [int(d) for d in m.feeds[0].shape[1:]]
    rng = np.random.default_rng(0)
    for i in range(steps + 1):  # the last run measures the loss on a fixed 512 examples
        idx = rng.integers(0, len(images), batch) if i < steps else np.arange(512)
        (loss,) = exe.run(compiled, scope=scope, fetch_list=[m.loss],
                          feed={m.feeds[0].name: images[idx].reshape(shape),
                                "label": labels[idx]})
    return float(loss[0])


@pytest.mark.parametrize("build", [lambda: models.mlp(64, (32, 32), 10),
                                   lambda: models.demo_cnn((1, 8, 8), 10, (4, 8))],
                         ids=["mlp", "cnn"])
def test_training_50_steps_matches_float32_within_2_percent(build):
    fp32, amp = _train(build, False), _train(build, True)
    assert fp32 < 1.5  # it trained (log 10 = 2.3 at the start)
    assert abs(amp - fp32) <= 0.02 * fp32, (amp, fp32)


# -- random programs ------------------------------------------------------------------------

@settings(max_examples=25)
@given(random_programs(max_ops=6, cast_dtypes=("float32",)))
def test_random_programs_verify_and_agree_within_bf16_tolerance(gen):
    if gen.loss is not None:
        with graphc.program_guard(gen.main, gen.startup):
            optimizer.SGD(0.01).minimize(gen.main.global_block().var(gen.loss))
    before, after = lower(gen.main), lower(gen.main)
    apply_amp(after, keep=[after.latest(f) for f in gen.fetch], init_loss_scaling=8.0)
    state, _ = run_graph(lower(gen.startup))
    state.update({LOSS_SCALING: np.array([8.0], "float32"),
                  GOOD_STEPS: np.zeros(1, "int32"), BAD_STEPS: np.zeros(1, "int32")})
    feeds = feeds_for(gen)
    want_state, want = run_graph(before, state, feeds, gen.fetch)
    assume(all(np.isfinite(a).all() for a in want if a.dtype.kind == "f"))
    got_state, got = run_graph(after, state, feeds, gen.fetch)
    for name, a, b in zip(gen.fetch, got, want):
        assert a.dtype == b.dtype and a.shape == b.shape, name
        if b.dtype.kind == "f":  # a few bf16 roundings (8 bits) along the way
            np.testing.assert_allclose(a, b, rtol=0.05, atol=0.05 * max(1.0, np.abs(b).max()),
                                       err_msg=name)
    for name, b in want_state.items():
        a = got_state[name]
        assert a.dtype == b.dtype and a.shape == b.shape, name
        np.testing.assert_allclose(a, b, rtol=0.05, atol=0.05 * max(1.0, np.abs(b).max()),
                                   err_msg=name)


# -- strategy and options -------------------------------------------------------------------

def test_build_strategy_switch_and_configs():
    bs = BuildStrategy()
    assert bs.amp is False and bs.amp_configs == AmpConfigs()
    c = bs.amp_configs
    assert (c.init_loss_scaling, c.incr_every_n_steps, c.decr_every_n_nan_or_inf,
            c.incr_ratio, c.decr_ratio, c.use_dynamic_loss_scaling, c.dtype) == \
        (32768.0, 1000, 2, 2.0, 0.8, True, "bfloat16")
    assert "amp" not in [p.name for p in passes_for(bs)]
    bs.amp = True
    names = [p.name for p in passes_for(bs)]
    assert names.index("amp") == names.index("dce") + 1
    # the seeds' amp_configs dict, as fleet's example writes it
    seeds = {"init_loss_scaling": 128, "decr_every_n_nan_or_inf": 2, "incr_every_n_steps": 1000,
             "incr_ratio": 2.0, "use_dynamic_loss_scaling": True, "decr_ratio": 0.5,
             "custom_white_list": [], "custom_black_list": []}
    bs.amp_configs = seeds
    assert bs.amp_configs.init_loss_scaling == 128.0
    amp = make_pass("amp", **bs.pass_options("amp"))
    assert (amp.init_loss_scaling, amp.decr_ratio) == (128.0, 0.5)
    assert amp.spec() == 'amp{init_loss_scaling=128.0,decr_ratio=0.5}'


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_amp_configs_round_trip_through_files(tmp_path, suffix):
    bs = BuildStrategy(amp=True, amp_configs={"dtype": "float16", "incr_ratio": 3.0,
                                              "custom_black_list": ["tanh"]})
    bs.save(tmp_path / f"s{suffix}")
    assert BuildStrategy.load(tmp_path / f"s{suffix}") == bs


def test_bad_configs_are_typed_errors():
    with pytest.raises(StrategyError, match=r"AmpConfigs\.decr_ratio"):
        BuildStrategy(amp_configs={"decr_ratio": 1.5})
    with pytest.raises(StrategyError, match=r"AmpConfigs\.dtype"):
        AmpConfigs(dtype="float64")
    with pytest.raises(StrategyError, match="both custom_white_list and custom_black_list"):
        AmpConfigs(custom_white_list=["tanh"], custom_black_list=["tanh"])
    bs = BuildStrategy()
    with pytest.raises(StrategyError, match=r"AmpConfigs\.incr_every_n_steps"):
        bs.amp_configs.incr_every_n_steps = 0
    with pytest.raises(PassError, match="unknown op types"):
        make_pass("amp", custom_white_list=["no_such_op"])
    with pytest.raises(PassError, match="init_loss_scaling"):
        make_pass("amp", init_loss_scaling=0.0)


def test_state_name_taken_by_another_variable_is_an_error():
    m = small_mlp()
    with graphc.program_guard(m.main, m.startup):
        layers.fill_constant([2], "float32", 1.0, out=m.main.global_block().create_var(
            LOSS_SCALING, [2], "float32", persistable=True))
    with pytest.raises(graphc.GraphcError, match=f"variable '{LOSS_SCALING}' that is not"):
        apply_amp(lower(m.main))


def test_amp_composes_with_the_other_passes_of_the_pipeline():
    """The strategy's whole pipeline (fusions, fused Adam, control deps, in-place plan)."""
    m = small_cnn(optimizer.Adam(0.01))
    bs = BuildStrategy(amp=True, fuse_all_optimizer_ops=True, fuse_bn_act_ops=True,
                       fuse_elewise_add_act_ops=True, enable_inplace=True,
                       enable_sequential_execution=True, verify_each_pass=True)
    graphc.amp.init_state(m.startup, bs)
    exe, scope = graphc.Executor(), graphc.Scope()
    exe.run(m.startup, scope=scope)
    compiled = graphc.CompiledProgram(m.main, build_strategy=bs)
    x = np.random.default_rng(0).uniform(-1, 1, (4, 1, 8, 8)).astype("float32")
    label = np.zeros((4, 1), "int64")
    found = []
    for bad in (False, True, False):
        before = {n: np.array(scope[n]) for n in scope.keys()}
        feed = {"image": np.where(bad, np.inf, x).astype("float32"), "label": label}
        _, flag = exe.run(compiled, feed=feed, scope=scope, fetch_list=[m.loss, FOUND_INFINITE])
        found.append(bool(flag[0]))
        changed = [n for n in before if np.array(scope[n]).tobytes() != before[n].tobytes()]
        assert (set(changed) <= {LOSS_SCALING, GOOD_STEPS, BAD_STEPS}) == bad
    assert found == [False, True, False]
    stats = compiled.last_report.stats()
    assert stats["fuse-all-optimizer-ops"]["fused adam"] == 8 and stats["fuse-bn-act"]["fused"]


def test_data_parallel_replicas_take_the_same_skip_decision():
    """Only one replica's slice overflows; the check reads all-reduced gradients, so every
    replica skips (AllReduce mode: data-parallel runs after amp in the pipeline)."""
    m = small_mlp(optimizer.Momentum(0.1, 0.9))
    bs = BuildStrategy(amp=True)
    graphc.amp.init_state(m.startup, bs)
    exe, scope = graphc.Executor(), graphc.Scope()
    exe.run(m.startup, scope=scope)
    places = graphc.cpu_places()[:2]
    compiled = graphc.CompiledProgram(m.main, build_strategy=bs).with_data_parallel(
        loss_name=m.loss.name, places=places)
    x = np.random.default_rng(0).uniform(-1, 1, (4, 8)).astype("float32")
    x[3, 0] = np.inf  # in the second replica's half of the batch only
    before = {n: np.array(scope[n]) for n in scope.keys()}
    found, bad = exe.run(compiled, feed={"x": x, "label": np.zeros((4, 1), "int64")},
                         scope=scope, fetch_list=[FOUND_INFINITE, BAD_STEPS])
    # fetches merge over replicas (one entry each, or one when they are equal): all agree
    assert found.all() and (bad == 1).all()
    for name, value in before.items():
        if name not in (LOSS_SCALING, GOOD_STEPS, BAD_STEPS):
            assert np.array(scope[name]).tobytes() == value.tobytes(), name


def test_paddle_black_list_ops_stay_in_float32():
    """Paddle 1.8's fp16 black list (log, cos_sim, sigmoid cross entropy, ...) and graphc's
    other losses and norms are black: never run in low precision."""
    from graphc.passes.amp import BLACK_LIST
    assert {"log", "cos_sim", "sigmoid_cross_entropy_with_logits", "mean", "sum", "exp",
            "square", "softmax", "softmax_with_cross_entropy", "cross_entropy"} <= BLACK_LIST
    from graphc.ir.opdef import LOSS, all_op_types, get_op_def
    from graphc.passes import make_pass
    amp = make_pass("amp")
    losses = {t for t in all_op_types() if not t.endswith("_grad")
              and get_op_def(t).has_trait(LOSS)}
    assert {"warpctc", "nce", "center_loss"} <= losses  # later losses, not in the list
    not_black = sorted(t for t in losses if amp.kind_of(t) != "black")
    assert not not_black, not_black
