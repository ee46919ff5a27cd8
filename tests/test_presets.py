"""Every preset in strategies/ loads, validates, is commented, and says what the seeds say."""

from __future__ import annotations

import pytest
from graphc.presets import load_preset, preset_names

import graphc
from graphc.passes import passes_for
from graphc.strategy import PRESETS_DIR, BuildStrategy, ReduceStrategy, StrategyError

EXPECTED = {"default", "debug", "fast-single-device", "collective-resnet50", "cpu-reduce",
            "inference"}


def test_the_issue_presets_exist():
    assert EXPECTED <= set(preset_names())


@pytest.mark.parametrize("name", preset_names())
def test_preset_loads_validates_and_is_commented(name):
    preset = load_preset(name)
    assert preset.description, f"{name}.toml needs a leading comment saying what it is for"
    assert isinstance(preset.build_strategy, graphc.BuildStrategy)
    assert isinstance(preset.execution_strategy, graphc.ExecutionStrategy)
    # the pipeline it asks for exists, on one device and on four
    passes_for(preset.build_strategy, 1, loss_name="loss")
    passes_for(preset.build_strategy, 4, loss_name="loss")
    # and the loaded strategy round-trips through graphc's own TOML writer
    again = BuildStrategy.from_dict(
        __import__("tomllib").loads(preset.build_strategy.to_toml()))
    assert again == preset.build_strategy


@pytest.mark.parametrize("name", [n for n in preset_names()
                                  if load_preset(n).kind == "build"])
def test_build_presets_load_with_buildstrategy_load(name):
    assert BuildStrategy.load(name) == load_preset(name).build_strategy


def test_collective_resnet50_is_the_seeds_example():
    ds = graphc.DistributedStrategy.load("collective-resnet50")
    assert load_preset("collective-resnet50").kind == "distributed"
    assert ds.nccl_comm_num == 2 and ds.sync_nccl_allreduce and ds.fuse_all_reduce_ops
    assert ds.fuse_grad_size_in_MB == 16 and ds.fuse_grad_size_in_TFLOPS == 50
    assert ds.amp and ds.amp_configs.init_loss_scaling == 128 and ds.amp_configs.decr_ratio == 0.5
    bs = ds.build_strategy
    assert bs.enable_sequential_execution and bs.fuse_elewise_add_act_ops
    assert bs.fuse_bn_act_ops and bs.fuse_all_optimizer_ops and bs.enable_auto_fusion
    es = ds.execution_strategy
    assert (es.num_threads, es.num_iteration_per_drop_scope, es.num_iteration_per_run) == (
        3, 100, 1)
    compiled = ds.to_build_strategy(num_trainers=4, local_devices=8)
    assert compiled.fuse_all_reduce_ops and compiled.amp and compiled.num_trainers == 4


def test_cpu_reduce_is_the_seeds_cpu_practice():
    preset = load_preset("cpu-reduce")
    assert preset.build_strategy.reduce_strategy == ReduceStrategy.Reduce
    assert preset.execution_strategy.num_threads == 8


def test_debug_and_inference():
    debug = load_preset("debug").build_strategy
    assert debug.verify_each_pass and debug.enable_sequential_execution
    assert not (debug.fuse_elewise_add_act_ops or debug.fuse_bn_act_ops)
    inference = load_preset("inference").build_strategy
    assert inference.memory_optimize and not inference.enable_backward_optimizer_op_deps


def test_bad_presets_are_clear_errors(tmp_path):
    with pytest.raises(StrategyError, match="no strategy preset 'nope'"):
        load_preset("nope")
    bad = tmp_path / "bad.toml"
    bad.write_text("[build_strategy]\nfuse_bn_act_ops = 'yes'\n")
    with pytest.raises(StrategyError, match="fuse_bn_act_ops"):
        load_preset(bad)
    bad.write_text("[builds]\n")
    with pytest.raises(StrategyError, match="a preset has tables"):
        load_preset(bad)
    assert (PRESETS_DIR / "default.toml").exists()
