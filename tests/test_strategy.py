"""BuildStrategy / ExecutionStrategy: the seeds' fields and defaults, validated assignment,
documented conflict rules (logged), TOML/JSON round trips, presets by name or path."""

from __future__ import annotations

import json
import logging

import pytest

import graphc as fluid
from graphc.passes import passes_for
from graphc.strategy import PRESETS_DIR, BuildStrategy, ExecutionStrategy, StrategyError


def test_seed_defaults():
    bs = fluid.BuildStrategy()
    assert bs.reduce_strategy == BuildStrategy.ReduceStrategy.AllReduce
    for name in ("enable_sequential_execution", "fuse_elewise_add_act_ops", "fuse_bn_act_ops",
                 "fuse_relu_depthwise_conv", "fuse_broadcast_ops", "fuse_all_optimizer_ops",
                 "enable_inplace", "memory_optimize", "enable_auto_fusion",
                 "fuse_all_reduce_ops", "cache_runtime_context"):
        assert getattr(bs, name) is False, name
    assert bs.enable_backward_optimizer_op_deps is True
    assert (bs.fuse_grad_size_in_MB, bs.fuse_grad_size_in_TFLOPS) == (32.0, 50.0)
    es = fluid.ExecutionStrategy()
    assert (es.num_threads, es.num_iteration_per_drop_scope, es.num_iteration_per_run) == \
        (1, 10, 1)


def test_assignment_is_validated_and_names_the_field():
    bs = fluid.BuildStrategy()
    with pytest.raises(StrategyError, match=r"BuildStrategy\.fuse_bn_act_ops: .*boolean.*'yes'"):
        bs.fuse_bn_act_ops = "yes"
    with pytest.raises(StrategyError, match="BuildStrategy has no field 'fuse_everything'"):
        bs.fuse_everything = True
    with pytest.raises(StrategyError, match="fuse_grad_size_in_MB: .*greater than 0"):
        bs.fuse_grad_size_in_MB = 0
    with pytest.raises(StrategyError, match="reduce_strategy"):
        bs.reduce_strategy = "Reduce"  # the enum, as in Paddle, not a string
    es = fluid.ExecutionStrategy()
    with pytest.raises(StrategyError, match=r"ExecutionStrategy\.num_threads: .*1"):
        es.num_threads = 0
    with pytest.raises(StrategyError, match="num_iteration_per_run"):
        fluid.ExecutionStrategy(num_iteration_per_run=1.5)
    assert bs.fuse_bn_act_ops is False and es.num_threads == 1  # unchanged after errors
    bs.reduce_strategy = fluid.BuildStrategy.ReduceStrategy.Reduce
    bs.fuse_grad_size_in_MB = 16  # an int is a valid float
    assert bs.fuse_grad_size_in_MB == 16.0


def test_conflicts_are_resolved_by_rules_and_logged(caplog):
    bs = fluid.BuildStrategy(fuse_broadcast_ops=True, memory_optimize=True,
                             fuse_all_reduce_ops=True)
    with caplog.at_level(logging.WARNING, logger="graphc.strategy"):
        resolved = bs.resolve(num_devices=1)
    assert resolved.fuse_broadcast_ops is False  # needs Reduce mode
    assert resolved.enable_inplace is True  # memory_optimize implies the in-place plan
    assert resolved.fuse_all_reduce_ops is False  # one device: nothing to fuse
    assert bs.fuse_broadcast_ops is True and bs.enable_inplace is False  # original untouched
    messages = "\n".join(r.getMessage() for r in caplog.records)
    assert "fuse_broadcast_ops applies only with ReduceStrategy.Reduce" in messages
    assert "enable_inplace turned on" in messages
    assert "fuse_all_reduce_ops has nothing to fuse on one device" in messages
    kept = bs.resolve(num_devices=4)
    assert kept.fuse_all_reduce_ops is True


def test_amp_with_reduce_mode_falls_back_to_allreduce(caplog):
    """amp's overflow check must see aggregated gradients, which Reduce mode does not give it
    (each device would decide alone whether to skip a step)."""
    bs = fluid.BuildStrategy(amp=True, reduce_strategy=BuildStrategy.ReduceStrategy.Reduce)
    with caplog.at_level(logging.WARNING, logger="graphc.strategy"):
        assert bs.resolve(num_devices=4).reduce_strategy == BuildStrategy.ReduceStrategy.AllReduce
    assert "reduce_strategy set to AllReduce" in caplog.text
    assert bs.resolve(num_devices=1).reduce_strategy == BuildStrategy.ReduceStrategy.Reduce


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_file_round_trip(tmp_path, suffix):
    bs = fluid.BuildStrategy(enable_sequential_execution=True, fuse_grad_size_in_MB=8.0,
                             reduce_strategy=BuildStrategy.ReduceStrategy.Reduce)
    path = tmp_path / f"s{suffix}"
    bs.save(path)
    assert BuildStrategy.load(path) == bs
    es = ExecutionStrategy(num_threads=3)
    es.save(tmp_path / f"e{suffix}")
    assert ExecutionStrategy.load(tmp_path / f"e{suffix}") == es
    if suffix == ".json":
        data = json.loads(path.read_text())
        assert data["build_strategy"]["reduce_strategy"] == "Reduce"


def test_file_errors(tmp_path):
    with pytest.raises(StrategyError, match="no strategy preset 'nope'; presets: .*debug"):
        BuildStrategy.load("nope")
    with pytest.raises(StrategyError, match="does not exist"):
        BuildStrategy.load(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[build_strategy]\nfuse_bn_act_ops = 3\n")
    with pytest.raises(StrategyError, match=r"bad.toml: .*fuse_bn_act_ops"):
        BuildStrategy.load(bad)
    bad.write_text("[build_strategy]\nreduce_strategy = \"Sideways\"\n")
    with pytest.raises(StrategyError, match="must be one of \\['AllReduce', 'Reduce'\\]"):
        BuildStrategy.load(bad)
    bad.write_text("not = [toml")
    with pytest.raises(StrategyError, match="not valid TOML"):
        BuildStrategy.load(bad)


def test_presets_load_by_name_and_build_pipelines():
    names = sorted(p.stem for p in PRESETS_DIR.glob("*.toml"))
    assert {"default", "debug", "fast-single-device"} <= set(names)
    debug = BuildStrategy.load("debug")
    assert debug.enable_sequential_execution and debug.verify_each_pass
    assert debug.changed_fields() == {"enable_sequential_execution": True,
                                      "verify_each_pass": True}
    assert BuildStrategy.load("default") == BuildStrategy()
    assert [p.name for p in passes_for(debug)] == ["dce", "fuse-embedding-seq-pool",
                                                   "roll-repeated-layers",
                                                   "backward-optimizer-op-deps",
                                                   "sequential-execution"]
