"""Parameter-server transpile (issue 17): DistributeTranspilerConfig's fields and checks, the
dispatchers, the slicing rule and placement, and the trainer / server / startup programs the
ps-* passes make (golden IR, only a server's own blocks, blocks equal to a local init)."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest

import graphc.fluid as fluid
from graphc.distributed.pserver import PServerError, Transpiler
from graphc.fluid.transpiler import HashName, RoundRobin
from graphc.passes import PassError, make_pass
from graphc.passes.pserver.plan import block_rows
from graphc.runtime.run_as import DATA_PARALLEL
from graphc.testing import check_golden

GOLDEN = Path(__file__).parent / "golden" / "ps-transpile"
EPS = ["127.0.0.1:6170", "127.0.0.1:6171"]


OPTIMIZERS = {"momentum": lambda reg: fluid.optimizer.Momentum(0.05, 0.9, regularization=reg),
              "adam": lambda reg: fluid.optimizer.Adam(0.01, regularization=reg),
              "sgd": lambda reg: fluid.optimizer.SGD(0.1, regularization=reg)}


def build(width: int = 128, l2: bool = True, seed: int = 7, optimizer: str = "momentum"):
    """A two-layer MLP (Momentum, L2 decay); its 128x128 weight is cut in two blocks."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, width], "float32")
        y = fluid.data("y", [-1, 1], "float32")
        h = fluid.layers.fc(x, width, act="tanh")
        p = fluid.layers.fc(h, 1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(p, y))
        reg = fluid.regularizer.L2Decay(0.01) if l2 else None
        OPTIMIZERS[optimizer](reg).minimize(loss)
    return main, startup


# -- the config ------------------------------------------------------------------------------
def test_config_fields_and_defaults_are_paddles():
    c = fluid.DistributeTranspilerConfig()
    expected = {"slice_var_up": True, "split_method": None, "min_block_size": 8192,
                "enable_dc_asgd": False, "mode": "pserver", "print_log": False,
                "wait_port": True, "runtime_split_send_recv": False, "sync_mode": True,
                "half_async": False, "completely_not_async": False, "geo_sgd_mode": False,
                "geo_sgd_need_push_nums": 100, "nccl_comm_num": 1,
                "use_hierarchical_allreduce": False, "hierarchical_allreduce_inter_nranks": 0,
                "collective_mode": None}
    assert {k: getattr(c, k) for k in expected} == expected


def test_sync_mode_and_runtime_split_exclude_each_other():
    c = fluid.DistributeTranspilerConfig()
    with pytest.raises(ValueError, match="sync_mode is false"):
        c.runtime_split_send_recv = True
    c.sync_mode = False
    c.runtime_split_send_recv = True
    with pytest.raises(ValueError, match="runtime_split_send_recv is false"):
        c.sync_mode = True


def test_config_checks():
    c = fluid.DistributeTranspilerConfig()
    c.min_block_size = 100
    with pytest.raises(ValueError, match="min_block_size must be >= 8192, got 100"):
        fluid.DistributeTranspiler(c)
    c = fluid.DistributeTranspilerConfig()
    c.split_method = "RoundRobin"
    with pytest.raises(TypeError, match="split_method"):
        fluid.DistributeTranspiler(c)
    c = fluid.DistributeTranspilerConfig()
    c.mode = "ring"
    with pytest.raises(ValueError, match="mode must be one of"):
        fluid.DistributeTranspiler(c)
    with pytest.raises(PServerError, match="trainer_id must be in"):
        Transpiler(EPS, trainers=2, trainer_id=2)


def test_dispatchers():
    rr = RoundRobin(EPS)
    assert rr.dispatch(["a", "b", "c"]) == [EPS[0], EPS[1], EPS[0]]
    rr.reset()
    assert rr.dispatch(["d"]) == [EPS[0]]
    names = [f"fc_{i}.w_0" for i in range(8)]
    # crc32, not Python's per-process salted hash: every process places alike
    assert HashName(EPS).dispatch(names) == [EPS[zlib.crc32(n.encode()) % 2] for n in names]


# -- slicing and placement ---------------------------------------------------------------------
def test_slicing_rule_follows_paddle():
    assert block_rows((1000, 1000), 2, 8192, True) == [(0, 500), (500, 1000)]
    assert block_rows((1000,), 2, 8192, True) == [(0, 1000)]  # 1000 < 8192: whole
    assert block_rows((1000, 1000), 2, 8192, False) == [(0, 1000)]
    assert block_rows((1000, 1000), 3, 8192, True) == [(0, 334), (334, 668), (668, 1000)]
    assert block_rows((1000, 1000), 2, 10**6, True) == [(0, 1000)]
    # whole rows: 3 blocks of ceil(30*7/3)=70 elements = 10 rows of 7
    assert block_rows((30, 7), 3, 10, True) == [(0, 10), (10, 20), (20, 30)]


@pytest.mark.parametrize("method", ["round_robin", "hash_name"])
@pytest.mark.parametrize("slice_var_up", [True, False])
def test_every_block_lands_where_the_rule_says(method, slice_var_up):
    main, startup = build()
    t = Transpiler(EPS, trainers=2, slice_var_up=slice_var_up, split_method=method)
    t.transpile(main, startup)
    plan = t.blocks()
    k = 0
    for pname in ("fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0"):
        shape = main.global_block().var(pname).shape
        rows = block_rows(shape, 2, 8192, slice_var_up)
        assert [(b[3], b[4]) for b in plan[pname]] == rows
        for b in plan[pname]:
            if method == "round_robin":
                assert b[5] == EPS[k % 2]
            else:
                assert b[5] == EPS[zlib.crc32(b[1].encode()) % 2]
            k += 1
    assert len(plan["fc_0.w_0"]) == (2 if slice_var_up else 1)
    # a server program holds exactly its blocks: parameters and gradient feeds
    for ep in EPS:
        prog = t.server_program(ep)
        block = prog.global_block()
        mine = {b[1] for blocks in plan.values() for b in blocks if b[5] == ep}
        assert {p.name for p in block.all_parameters()} == mine
        grads = {b[2] for blocks in plan.values() for b in blocks if b[5] == ep}
        feeds = {v.name for v in block.vars.values() if v.is_data}
        assert feeds == {f"{g}.trainer_{i}" for g in grads for i in range(2)}
        optimizers = [op for op in block.ops if op.type == "momentum"]
        assert sorted(op.input("Param")[0] for op in optimizers) == sorted(mine)


# -- the programs --------------------------------------------------------------------------------
def test_trainer_and_server_graphs_golden():
    main, startup = build(width=8)
    t = Transpiler(EPS, trainers=2, min_block_size=16).transpile(main, startup)
    check_golden(GOLDEN / "mlp_momentum_l2.trainer.ir", t.trainer_graph.to_text())
    for i, ep in enumerate(EPS):
        check_golden(GOLDEN / f"mlp_momentum_l2.server{i}.ir", t.server_graph(ep).to_text())
        check_golden(GOLDEN / f"mlp_momentum_l2.server{i}.startup.ir",
                     t._server(ep)[1].to_text())


def test_trainer_program_op_list_and_paddle_surface():
    main, startup = build()
    t = fluid.DistributeTranspiler()
    t.transpile(0, program=main, pservers=",".join(EPS), trainers=2, startup_program=startup)
    ops = [op.type for op in t.get_trainer_program().global_block().ops]
    assert "momentum" not in ops and "sgd" not in ops
    tail = ops[ops.index("send"):]  # one send and one recv of every block: 2 host callbacks
    assert tail == ["send", "send_barrier", "recv", "fetch_barrier", "concat", "concat",
                    "concat", "concat"]
    assert ops.count("split") == 1
    server, server_startup = t.get_pserver_programs(EPS[0])
    assert [op.type for op in server.global_block().ops].count("momentum") == 3  # w.block0, b0, b1
    assert t.get_startup_program(EPS[0], server) is not None


def test_server_startup_blocks_equal_the_rows_of_a_local_init():
    main, startup = build()
    t = Transpiler(EPS, trainers=2).transpile(main, startup)
    exe = fluid.Executor(fluid.CPUPlace())
    local = fluid.Scope()
    exe.run(startup, scope=local)
    plan = t.blocks()
    for ep in EPS:
        scope = fluid.Scope()
        exe.run(t.server_startup(ep), scope=scope)
        for pname, blocks in plan.items():
            for b in blocks:
                if b[5] == ep:
                    np.testing.assert_array_equal(np.asarray(scope[b[1]]),
                                                  np.asarray(local[pname])[b[3]:b[4]])


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_server_update_is_the_mean_of_the_trainers_gradients(optimizer):
    """The server program run on two trainers' gradient blocks equals the local update of
    those rows with the mean gradient (no MPI: its feeds are given by hand); Adam's scalar
    state (beta powers) gets a copy per block."""
    main, startup = build(optimizer=optimizer)
    with fluid.unique_name.guard():  # the same names, without the L2 decay ops: its
        plain, _ = build(l2=False, optimizer=optimizer)  # gradients are the backward ones
    t = Transpiler(EPS, trainers=2).transpile(main, startup)
    exe = fluid.Executor(fluid.CPUPlace())
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((4, 128)).astype("float32"),
              "y": rng.standard_normal((4, 1)).astype("float32")} for _ in range(2)]
    grads = []
    for f in feeds:  # each trainer's gradients at the initial parameters
        s = fluid.Scope()
        exe.run(startup, scope=s)
        names = [f"{p}@GRAD" for p in ("fc_0.w_0", "fc_0.b_0", "fc_1.w_0", "fc_1.b_0")]
        grads.append(dict(zip(names, exe.run(plain, feed=f, fetch_list=names, scope=s))))
    local = fluid.Scope()
    exe.run(startup, scope=local)
    exe.run(main, feed={k: np.concatenate([f[k] for f in feeds]) for k in ("x", "y")},
            scope=local)
    plan = t.blocks()
    for ep in EPS:
        scope = fluid.Scope()
        exe.run(t.server_startup(ep), scope=scope)
        prog = t.server_program(ep)
        feed = {}
        for pname, blocks in plan.items():
            for b in blocks:
                if b[5] == ep:
                    for i in range(2):
                        feed[f"{b[2]}.trainer_{i}"] = grads[i][f"{pname}@GRAD"][b[3]:b[4]]
        exe.run(prog, feed=feed, scope=scope)
        for pname, blocks in plan.items():
            for b in blocks:
                if b[5] == ep:
                    np.testing.assert_allclose(np.asarray(scope[b[1]]),
                                               np.asarray(local[pname])[b[3]:b[4]], atol=1e-6)


def test_async_transpile_has_no_barrier_and_one_feed_per_block():
    main, startup = build()
    c = fluid.DistributeTranspilerConfig()
    c.sync_mode = False
    c.runtime_split_send_recv = True
    t = fluid.DistributeTranspiler(c)
    t.transpile(1, program=main, pservers=",".join(EPS), trainers=2, startup_program=startup)
    ops = [op.type for op in t.get_trainer_program().global_block().ops]
    assert "send_barrier" not in ops and ops.count("recv") == 1
    server = t.get_pserver_program(EPS[1]).global_block()
    feeds = sorted(v.name for v in server.vars.values() if v.is_data)
    assert feeds == ["fc_0.w_0@GRAD.block1", "fc_1.w_0@GRAD"]  # no per-trainer copies
    assert [op.type for op in server.ops].count("scale") == 2  # L2 decay only, no mean


def test_geo_transpile_keeps_the_optimizer_on_trainers_and_adds_deltas_on_servers():
    main, startup = build()
    c = fluid.DistributeTranspilerConfig()
    c.sync_mode = False
    c.geo_sgd_mode, c.geo_sgd_need_push_nums = True, 5
    t = fluid.DistributeTranspiler(c)
    t.transpile(0, program=main, pservers=",".join(EPS), trainers=2, startup_program=startup)
    ops = [op.type for op in t.get_trainer_program().global_block().ops]
    assert ops.count("momentum") == 4 and ops[-1] == "geo_sgd_exchange"
    assert "send" not in ops and "recv" not in ops
    geo = t.get_trainer_program().global_block().ops[-1]
    assert geo.attrs["push_nums"] == 5 and geo.attrs["counts"] == [2, 1, 1, 1]
    server = t.get_pserver_program(EPS[0]).global_block()
    assert [op.type for op in server.ops] == ["elementwise_add"] * 3
    assert sorted(v.name for v in server.vars.values() if v.is_data) == [
        "fc_0.b_0@DELTA", "fc_0.w_0.block0@DELTA", "fc_1.b_0@DELTA"]


def test_dc_asgd_server_update_compensates_the_delay():
    """enable_dc_asgd (async): a server applies SGD to g + g*g*(w - w_bak), w_bak the block as
    the sending trainer last received it (fed by the server loop)."""
    main, startup = build(optimizer="sgd", l2=False)
    c = fluid.DistributeTranspilerConfig()
    c.sync_mode = False
    c.enable_dc_asgd = True
    t = fluid.DistributeTranspiler(c)
    t.transpile(0, program=main, pservers=",".join(EPS), trainers=2, startup_program=startup)
    prog, server_startup = t.get_pserver_programs(EPS[0])
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(server_startup, scope=scope)
    rng = np.random.default_rng(2)
    feed, expected = {}, {}
    for v in prog.global_block().vars.values():
        if v.is_data and not v.name.endswith("@BAK"):
            block = v.name.replace("@GRAD", "")
            w = np.asarray(scope[block])
            g = rng.standard_normal(w.shape).astype("float32")
            bak = (w + rng.standard_normal(w.shape) * 0.1).astype("float32")
            feed[v.name], feed[f"{block}@BAK"] = g, bak
            expected[block] = w - 0.1 * (g + g * g * (w - bak))
    assert len(expected) == 3  # fc_0.w_0.block0, fc_0.b_0, fc_1.b_0
    exe.run(prog, feed=feed, scope=scope)
    for block, value in expected.items():
        np.testing.assert_allclose(np.asarray(scope[block]), value, rtol=1e-5, atol=1e-6)


def test_refusals_name_what_is_unsupported():
    main, startup = build()
    c = fluid.DistributeTranspilerConfig()
    c.enable_dc_asgd = True
    t = fluid.DistributeTranspiler(c)
    with pytest.raises(PServerError, match="enable_dc_asgd needs async"):
        t.transpile(0, program=main, pservers=EPS[0], trainers=1, startup_program=startup)
    with pytest.raises(PServerError, match="transpile"):
        fluid.DistributeTranspiler().get_trainer_program()
    with pytest.raises(PassError, match="split_method must be one of"):
        make_pass("ps-slice-variables", split_method="random")
    with pytest.raises(PServerError, match="not one of the servers"):
        Transpiler(EPS).transpile(main, startup).server_program("10.0.0.1:1")


class _LoopbackChannel:
    """Stands in for the MPI channel: records what send ships; recv answers each parameter
    block with its gradient block + 1 (so the test can tell what came back)."""

    def __init__(self):
        self.sent, self.calls, self.geo_calls, self.shapes = {}, [], 0, {}

    def send(self, names, epmap, arrays):
        self.calls.append("send")
        self.sent.update(zip(names, arrays))

    def send_barrier(self):
        self.calls.append("send_barrier")

    def recv(self, names, epmap, initial=False):
        if initial:  # the servers' initial blocks: 100 + the block's index
            return [np.full(self.shapes[n], 100.0 + i, "float32") for i, n in enumerate(names)]
        self.calls.append("recv")
        grad = {n: n.replace(".block", "@GRAD.block") if ".block" in n else n + "@GRAD"
                for n in names}
        return [self.sent[grad[n]] + 1 for n in names]

    def fetch_barrier(self):
        self.calls.append("fetch_barrier")

    def geo_exchange(self, spec, olds, xs):
        self.geo_calls += 1
        return [x * 0 + self.geo_calls for x in xs]


def test_trainer_program_runs_its_exchange_in_order_inside_one_compiled_step():
    """The trainer program under the ordinary Executor, with a loopback channel: the ordered
    host callbacks run send, send_barrier, recv, fetch_barrier, and what recv returns
    becomes the parameters; a GEO program calls its exchange once per step."""
    from graphc.backends.lowering import LoweringError
    from graphc.runtime.host_services import HostServices
    main, startup = build()
    ch = _LoopbackChannel()
    # the channel comes with this Executor's services: nothing process-wide is installed
    t = Transpiler(EPS, trainers=2).transpile(main, startup)
    exe = fluid.Executor(fluid.CPUPlace(), services=HostServices(channel=ch))
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(1)
    feed = {"x": rng.standard_normal((4, 128)).astype("float32"),
            "y": rng.standard_normal((4, 1)).astype("float32")}
    exe.run(t.trainer_program(), feed=feed, scope=scope)
    assert ch.calls == ["send", "send_barrier", "recv", "fetch_barrier"]
    w = np.asarray(scope["fc_0.w_0"])
    grad = np.concatenate([ch.sent["fc_0.w_0@GRAD.block0"], ch.sent["fc_0.w_0@GRAD.block1"]])
    np.testing.assert_array_equal(w, grad + 1)
    np.testing.assert_array_equal(np.asarray(scope["fc_1.b_0"]), ch.sent["fc_1.b_0@GRAD"] + 1)
    geo = Transpiler(EPS, trainers=2, geo_push_nums=3).transpile(main, startup)
    for step in (1, 2):
        exe.run(geo.trainer_program(), feed=feed, scope=scope)
        assert ch.geo_calls == step
        np.testing.assert_array_equal(np.asarray(scope["fc_0.b_0"]), step)
    # another Executor, with services of its own, shares none of it: its step cannot lower
    other = fluid.Executor(fluid.CPUPlace(), services=HostServices())
    with pytest.raises(LoweringError, match="no parameter-server trainer"):
        other.run(t.trainer_program(), feed=feed, scope=scope)


def test_nccl2_mode_is_graphcs_collective_path():
    """mode="nccl2": the program becomes the collective data-parallel program (every device
    of every process; here one), and trains as the local program does."""
    rng = np.random.default_rng(1)
    feed = {"x": rng.standard_normal((4, 128)).astype("float32"),
            "y": rng.standard_normal((4, 1)).astype("float32")}
    results = []
    for nccl2 in (False, True):
        with fluid.unique_name.guard():
            main, startup = build()
        if nccl2:
            c = fluid.DistributeTranspilerConfig()
            c.mode = "nccl2"
            fluid.DistributeTranspiler(c).transpile(
                0, program=main, startup_program=startup, trainers="127.0.0.1:6170",
                current_endpoint="127.0.0.1:6170")
            assert DATA_PARALLEL.compiled_for(main) is not None
        exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
        exe.run(startup, scope=scope)
        for _ in range(2):
            exe.run(main, feed=feed, scope=scope)
        results.append((np.asarray(scope["fc_1.w_0"]), np.asarray(scope["fc_0.w_0"])))
    np.testing.assert_allclose(results[1][0], results[0][0], atol=1e-6)
    np.testing.assert_allclose(results[1][1], results[0][1], atol=1e-6)


def test_trainer_startup_pulls_the_initial_parameters_from_the_servers():
    """Transpiler.trainer_startup (fleet's worker startup_program): after the initialisers,
    recv (initial) + fetch_barrier + concat replace each parameter by the servers' blocks."""
    from graphc.runtime.host_services import HostServices
    main, startup = build()
    t = Transpiler(EPS, trainers=2).transpile(main, startup)
    ch = _LoopbackChannel()
    for name, blocks in t.blocks().items():
        shape = main.global_block().var(name).shape
        for b in blocks:
            ch.shapes[b[1]] = (b[4] - b[3], *shape[1:])
    prog = t.trainer_startup()
    ops = [op.type for op in prog.global_block().ops]
    tail = ops[ops.index("recv"):]
    assert tail == ["recv"] * 4 + ["fetch_barrier"] + ["concat"] * 4
    scope = fluid.Scope()
    fluid.Executor(fluid.CPUPlace(), services=HostServices(channel=ch)).run(prog, scope=scope)
    w = np.asarray(scope["fc_0.w_0"])
    np.testing.assert_array_equal(w[:64], 100.0)  # block 0
    np.testing.assert_array_equal(w[64:], 101.0)  # block 1
    np.testing.assert_array_equal(np.asarray(scope["fc_1.b_0"]), 100.0)
    assert float(np.asarray(scope["learning_rate_0"])[0]) == pytest.approx(0.05)


def test_row_sparse_gradients_travel_as_rows_and_update_as_locally():
    """An is_sparse embedding's gradient is pushed as rows, each block's rows to its server
    (which adds them into the block's gradient); the servers' SGD update of the table's
    blocks equals the local one."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.program_guard(main, startup):
        ids = fluid.data("ids", [-1, 1], "int64")
        y = fluid.data("y", [-1, 1], "float32")
        emb = fluid.layers.embedding(ids, size=[300, 64], is_sparse=True)  # 19200: 2 blocks
        pred = fluid.layers.fc(emb, 1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        fluid.optimizer.SGD(0.5).minimize(loss)
    table = main.global_block().all_parameters()[0].name
    t = Transpiler(EPS, trainers=2).transpile(main, startup)
    ops = [op.type for op in t.trainer_program().global_block().ops]
    assert "split" not in ops and "get_tensor_from_selected_rows" not in ops
    (push,) = [op for op in t.trainer_program().global_block().ops if op.type == "send_rows"]
    assert push.attr("split") == "range" and sum(push.attr("sections")) == 300
    assert push.attr("varnames") == [f"{table}@GRAD.block0", f"{table}@GRAD.block1"]
    exe = fluid.Executor(fluid.CPUPlace())
    rng = np.random.default_rng(0)
    feeds = [{"ids": rng.integers(0, 300, (4, 1)).astype("int64"),
              "y": rng.standard_normal((4, 1)).astype("float32")} for _ in range(2)]
    grads = []
    for f in feeds:
        s = fluid.Scope()
        exe.run(startup, scope=s)
        names = [f"{p.name}@GRAD" for p in main.global_block().all_parameters()]
        grads.append({n: np.asarray(g) for n, g in
                      zip(names, exe.run(main, feed=f, fetch_list=names, scope=s))})
    local = fluid.Scope()
    exe.run(startup, scope=local)
    exe.run(main, feed={k: np.concatenate([f[k] for f in feeds]) for k in ("ids", "y")},
            scope=local)
    plan = t.blocks()
    assert len(plan[table]) == 2
    for ep in EPS:
        scope = fluid.Scope()
        exe.run(t.server_startup(ep), scope=scope)
        feed = {f"{b[2]}.trainer_{i}": grads[i][f"{name}@GRAD"][b[3]:b[4]]
                for name, blocks in plan.items() for b in blocks if b[5] == ep
                for i in range(2)}
        exe.run(t.server_program(ep), feed=feed, scope=scope)
        for name, blocks in plan.items():
            for b in blocks:
                if b[5] == ep:
                    np.testing.assert_allclose(np.asarray(scope[b[1]]),
                                               np.asarray(local[name])[b[3]:b[4]], atol=1e-6)


def test_server_learning_rate_schedule_steps_once_per_round():
    """A schedule with a step counter (exponential_decay, staircase every 2 steps) runs on
    every server that owns a block: its counter is server state, advanced once per round, so
    three sync rounds of two trainers' gradients equal three local steps (Paddle's LR block)."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 4], "float32")
        y = fluid.data("y", [-1, 1], "float32")
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(x, 1), y))
        lr = fluid.layers.exponential_decay(0.4, decay_steps=2, decay_rate=0.25, staircase=True)
        fluid.optimizer.SGD(lr).minimize(loss)
    t = Transpiler(EPS, trainers=2).transpile(main, startup)
    exe = fluid.Executor(fluid.CPUPlace())
    local, probe = fluid.Scope(), fluid.Scope()
    exe.run(startup, scope=local)
    servers = {}
    for ep in EPS:
        servers[ep] = fluid.Scope()
        exe.run(t.server_startup(ep), scope=servers[ep])
        types = [op.type for op in t.server_program(ep).global_block().ops]
        assert types.count("increment") == 1 and "exponential_decay" in types
    params = ("fc_0.w_0", "fc_0.b_0")
    grads = [f"{p}@GRAD" for p in params]
    rng = np.random.default_rng(1)
    for _ in range(3):
        halves = [{"x": rng.standard_normal((3, 4)).astype("float32"),
                   "y": rng.standard_normal((3, 1)).astype("float32")} for _ in range(2)]
        per_trainer = []
        for half in halves:  # each trainer's gradients at the current parameters
            exe.run(startup, scope=probe)
            for p in params:
                probe[p] = np.asarray(local[p])
            per_trainer.append(dict(zip(grads, exe.run(main, feed=half, fetch_list=grads,
                                                       scope=probe))))
        exe.run(main, feed={k: np.concatenate([h[k] for h in halves]) for k in ("x", "y")},
                scope=local)
        for ep, scope in servers.items():
            prog = t.server_program(ep)
            feeds = {v.name: per_trainer[int(v.name[-1])][v.name.rsplit(".trainer_", 1)[0]]
                     for v in prog.global_block().vars.values() if v.is_data}
            exe.run(prog, feed=feeds, scope=scope)
        for p in params:
            (owner,) = {b[5] for b in t.blocks()[p]}
            np.testing.assert_allclose(np.asarray(servers[owner][p]), np.asarray(local[p]),
                                       atol=1e-6, err_msg=p)
    assert {b[5] for blocks in t.blocks().values() for b in blocks} == set(EPS)
    for scope in servers.values():  # each server counted the three rounds
        assert float(np.asarray(scope["@LR_DECAY_COUNTER@"]).reshape(-1)[0]) == float(
            np.asarray(local["@LR_DECAY_COUNTER@"]).reshape(-1)[0])


def test_global_norm_clipping_sums_the_servers_parts_in_sync_mode_only():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [-1, 128], "float32")
        y = fluid.data("y", [-1, 1], "float32")
        h = fluid.layers.fc(x, 128, act="tanh")
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(h, 1), y))
        clip = fluid.clip.GradientClipByGlobalNorm(0.5)
        fluid.optimizer.SGD(0.1, grad_clip=clip).minimize(loss)
    t = Transpiler(EPS, trainers=2).transpile(main, startup)
    for ep in EPS:  # each server: its blocks' chains, their sum, one sum over the servers
        types = [op.type for op in t.server_graph(ep).ops()]
        assert types.count("ps_server_sum") == 1
        mine = sum(b[5] == ep for blocks in t.blocks().values() for b in blocks)
        assert types.count("square") == mine
    with pytest.raises(PassError, match="global-norm clipping on parameter servers needs sync"):
        Transpiler(EPS, trainers=2, sync_mode=False).transpile(main, startup).server_graph(
            EPS[0])
