"""Every field of Paddle 1.6-1.8's BuildStrategy and ExecutionStrategy is accepted; one without
effect on XLA logs once per process; the fleet guide's ``BuildStrategy = {...}`` spelling; and
CPU_NUM unset means one CPU place per core (as far as XLA has devices), with a warning."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import graphc
from graphc import layers, optimizer
from graphc import strategy as strategy_mod
from graphc.distributed.strategy import DistributedStrategy
from graphc.runtime import devices
from graphc.strategy import BuildStrategy, ExecutionStrategy, StrategyError

# Paddle 1.8's pybind properties with a valid non-default value for each
PADDLE_BUILD = {
    "reduce_strategy": BuildStrategy.ReduceStrategy.Reduce,
    "gradient_scale_strategy": BuildStrategy.GradientScaleStrategy.One,
    "debug_graphviz_path": "/tmp/g", "enable_sequential_execution": True,
    "remove_unnecessary_lock": False, "num_trainers": 2,
    "trainers_endpoints": ["10.0.0.1:6170", "10.0.0.2:6170"], "trainer_id": 1,
    "nccl_comm_num": 2, "use_hierarchical_allreduce": True,
    "hierarchical_allreduce_inter_nranks": 8, "fuse_elewise_add_act_ops": True,
    "fuse_bn_act_ops": True, "fuse_relu_depthwise_conv": True, "fuse_broadcast_ops": True,
    "fuse_all_optimizer_ops": True, "sync_batch_norm": True, "memory_optimize": True,
    "is_distribution": True, "async_mode": True, "enable_inplace": True,
    "fuse_all_reduce_ops": True, "enable_backward_optimizer_op_deps": False,
    "cache_runtime_context": True, "mkldnn_enabled_op_types": ["conv2d", "pool2d"],
    "enable_auto_fusion": True,
}
PADDLE_EXECUTION = {
    "num_threads": 8, "use_cuda": False, "allow_op_delay": True,
    "num_iteration_per_drop_scope": 30, "num_iteration_per_run": 2, "_dry_run": True,
    "use_experimental_executor": False, "use_thread_barrier": True,
}


@pytest.fixture
def fresh_warnings(monkeypatch):
    """Forget which fields have warned, so each test sees its first warning."""
    monkeypatch.setattr(strategy_mod, "_WARNED_NO_EFFECT", set())


def _no_effect_records(caplog, field: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if f".{field} = " in r.getMessage() and "has no effect" in r.getMessage()]


@pytest.mark.parametrize("cls, fields", [(BuildStrategy, PADDLE_BUILD),
                                         (ExecutionStrategy, PADDLE_EXECUTION)])
def test_every_paddle_field_is_accepted_and_kept(cls, fields, fresh_warnings):
    s = cls()
    for name, value in fields.items():
        setattr(s, name, value)
        assert getattr(s, name) == value, name
    again = cls.from_dict(dict(__import__("tomllib").loads(s.to_toml())))
    assert again.to_dict() == s.to_dict()  # the new fields survive a file round trip


def test_fields_without_effect_log_once_per_process(caplog, fresh_warnings):
    with caplog.at_level(logging.WARNING, logger="graphc.strategy"):
        bs = BuildStrategy()
        bs.nccl_comm_num = 2
        bs.nccl_comm_num = 3
        BuildStrategy(nccl_comm_num=4)
        bs.fuse_bn_act_ops = True  # has an effect: no word
        bs.remove_unnecessary_lock = True  # the default: nothing asked in vain
        es = ExecutionStrategy(num_iteration_per_drop_scope=30)
        es.num_iteration_per_drop_scope = 100
        es._dry_run = True
    assert len(_no_effect_records(caplog, "nccl_comm_num")) == 1
    assert "XLA chooses its communicators" in _no_effect_records(caplog, "nccl_comm_num")[0]
    assert not _no_effect_records(caplog, "fuse_bn_act_ops")
    assert not _no_effect_records(caplog, "remove_unnecessary_lock")
    assert len(_no_effect_records(caplog, "num_iteration_per_drop_scope")) == 1
    assert len(_no_effect_records(caplog, "dry_run")) == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="graphc.strategy"):
        bs.remove_unnecessary_lock = False
        BuildStrategy(nccl_comm_num=5)
    assert len(_no_effect_records(caplog, "remove_unnecessary_lock")) == 1
    assert not _no_effect_records(caplog, "nccl_comm_num")  # already said in this process


def test_paddle_spellings_and_values():
    bs = BuildStrategy()
    bs.memory_optimize = None  # Paddle's "framework decides"
    assert bs.memory_optimize is False
    bs.mkldnn_enabled_op_types = {"relu", "conv2d"}  # Paddle takes a set
    assert bs.mkldnn_enabled_op_types == ["conv2d", "relu"]
    es = ExecutionStrategy()
    es._dry_run = True
    assert es.dry_run is True and es._dry_run is True
    assert es.use_cuda is True and es.use_experimental_executor is True  # Paddle's defaults


@pytest.mark.parametrize("cls, field, bad, expected", [
    (BuildStrategy, "nccl_comm_num", 0, "greater than or equal to 1"),
    (BuildStrategy, "nccl_comm_num", "2", "valid integer"),
    (BuildStrategy, "trainers_endpoints", "127.0.0.1:6170", "valid list"),
    (BuildStrategy, "mkldnn_enabled_op_types", [1], "valid string"),
    (BuildStrategy, "async_mode", "yes", "valid boolean"),
    (ExecutionStrategy, "use_experimental_executor", 1, "valid boolean"),
    (ExecutionStrategy, "_dry_run", "no", "dry_run"),
])
def test_bad_values_are_strategy_errors_naming_the_field(cls, field, bad, expected):
    s = cls()
    with pytest.raises(StrategyError, match=expected) as err:
        setattr(s, field, bad)
    assert field.lstrip("_") in str(err.value)


def test_fleet_guide_buildstrategy_spelling(caplog):
    ds = DistributedStrategy()
    with caplog.at_level(logging.WARNING, logger="graphc.distributed"):
        ds.BuildStrategy = {"num_iteration_per_drop_scope": 30, "fuse_bn_act_ops": True}
    assert ds.execution_strategy.num_iteration_per_drop_scope == 30
    assert ds.build_strategy.fuse_bn_act_ops is True
    text = caplog.text
    assert "spelling of 'build_strategy'" in text
    assert "num_iteration_per_drop_scope -> execution_strategy (an ExecutionStrategy field)" \
        in text
    ds.ExecutionStrategy = {"num_iteration_per_run": 2}
    assert ds.execution_strategy.num_iteration_per_run == 2
    es = ExecutionStrategy(num_threads=3)
    ds.ExecutionStrategy = es
    assert ds.execution_strategy.num_threads == 3
    with pytest.raises(StrategyError, match="'nope' is a field of neither"):
        ds.BuildStrategy = {"fuse_bn_act_ops": False, "nope": 1}
    assert ds.build_strategy.fuse_bn_act_ops is True  # all or nothing
    with pytest.raises(StrategyError, match="num_iteration_per_run"):
        ds.BuildStrategy = {"num_iteration_per_run": 0}


# -- CPU_NUM unset: one CPU place per core, bounded by XLA's devices -------------------------
def test_default_cpu_places_follow_the_cores(monkeypatch, caplog):
    monkeypatch.delenv("CPU_NUM", raising=False)
    have = len(jax.devices("cpu"))  # XLA started long ago in this process
    monkeypatch.setattr(devices, "_core_count", lambda: 2)
    with caplog.at_level(logging.WARNING, logger="graphc.runtime"):
        assert devices.default_cpu_place_count() == 2
    assert "CPU_NUM is not set, default to 2" in caplog.text
    caplog.clear()
    monkeypatch.setattr(devices, "_core_count", lambda: have + 5)
    with caplog.at_level(logging.WARNING, logger="graphc.runtime"):
        assert devices.default_cpu_place_count() == have
    assert f"default to {have}" in caplog.text
    assert f"started with {have} devices, fewer than the {have + 5} cores" in caplog.text
    monkeypatch.setenv("CPU_NUM", "1")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="graphc.runtime"):
        assert devices.default_cpu_place_count() == 1
    assert "CPU_NUM is not set" not in caplog.text


def test_parallel_executor_and_with_data_parallel_use_the_default(monkeypatch):
    monkeypatch.delenv("CPU_NUM", raising=False)
    monkeypatch.setattr(devices, "_core_count", lambda: 2)
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        x = layers.data("x", [3])
        loss = layers.mean(layers.fc(x, 2))
        optimizer.SGD(0.1).minimize(loss)
    scope = graphc.Scope()
    graphc.Executor().run(startup, scope=scope)
    cp = graphc.CompiledProgram(main).with_data_parallel(loss_name=loss.name)
    assert cp.num_devices == 2
    pe = graphc.ParallelExecutor(use_cuda=False, loss_name=loss.name, main_program=main,
                                 scope=scope)
    assert pe.device_count == 2
    out, = pe.run([loss.name], feed={"x": np.ones((4, 3), "float32")})
    assert out.shape == (2,)


def test_before_xla_starts_the_default_asks_for_every_core():
    code = textwrap.dedent("""
        import jax, graphc
        from graphc.runtime import devices
        devices._core_count = lambda: 3
        print(devices.default_cpu_place_count(), jax.device_count("cpu"))
    """)
    env = {k: v for k, v in os.environ.items() if k != "CPU_NUM"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["3", "3"]
    assert "CPU_NUM is not set, default to 3" in out.stderr


def test_cpu_num_beyond_xla_devices_maps_the_places_onto_one_device(monkeypatch):
    # issue 25: Paddle reads CPU_NUM when the program is built; with fewer XLA devices the
    # places share device 0 (same numbers: tests/test_framework_surface.py)
    have = len(jax.devices("cpu"))
    monkeypatch.setenv("CPU_NUM", str(have + 1))
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup):
        loss = layers.mean(layers.fc(layers.data("x", [3]), 2))
    compiled = graphc.CompiledProgram(main).with_data_parallel(loss_name=loss.name)
    assert compiled.num_devices == have + 1
    assert set(compiled.devices) == {jax.devices("cpu")[0]}
