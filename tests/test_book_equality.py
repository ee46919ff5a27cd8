"""Paddle's own equality tests (test_parallel_executor_mnist, test_fuse_elewise_add_act_pass,
test_fuse_optimizer_pass, test_fuse_all_reduce_pass, test_ir_inplace_pass, the seresnext
Reduce tests) re-created: tests/book_programs/parallel_executor_check.py, ported by the rule
alone, builds each model twice with the same random_seed and compares the first and last loss
of single-device vs with_data_parallel on 4 CPU places, fused vs unfused, Reduce vs AllReduce,
within Paddle's tolerances."""

from __future__ import annotations

import numpy as np
import pytest
from porting import run_book_program

CPU_NUM = 4
_RUNS: dict = {}
# One xdist worker runs the module: its tests share converge()'s runs (the plain simple_fc_net
# and fc_with_batchnorm runs serve four and seven tests) and the ported harness, which two
# workers would each compute again.
pytestmark = pytest.mark.xdist_group("book_equality")


@pytest.fixture(autouse=True)
def cpu_num(monkeypatch):
    """As Paddle's tests set os.environ['CPU_NUM'] = '4' for their CPU places."""
    monkeypatch.setenv("CPU_NUM", str(CPU_NUM))


@pytest.fixture(scope="module")
def harness():
    return run_book_program("parallel_executor_check")


def converge(harness, model: str, optimizer: str | None = None, **kwargs):
    """check_network_convergence on Paddle's fixed batch; runs are cached by their
    arguments (several comparisons share the plain data-parallel run)."""
    key = (model, optimizer, tuple(sorted(kwargs.items())))
    if key not in _RUNS:
        if model == "se_resnext_small":
            img, label = harness["init_data"](batch_size=16, img_shape=(3, 8, 8))
        elif model == "sparse_embedding_net":
            img, label = harness["init_data"](img_shape=(8,))
            img = (img * 50).astype("int64")  # word ids in [0, 50)
        elif model.startswith("ngram"):
            start = np.random.RandomState(7).randint(0, 50, (32, 1))
            img = (start + np.arange(4)) % 50  # counting words: the next is the fourth + 1
            label = (start + 4) % 50
        else:
            img, label = harness["init_data"]()
        opt = {None: None, "se_resnext": harness["se_resnext_optimizer"],
               "sgd": lambda: harness["fluid"].optimizer.SGD(learning_rate=0.05),
               "momentum": lambda: harness["fluid"].optimizer.Momentum(learning_rate=0.05,
                                                                       momentum=0.9),
               "adam": lambda: harness["fluid"].optimizer.Adam(learning_rate=0.01),
               "sgd_l2": lambda: sgd_global_norm_clip(harness["fluid"], clip=False),
               "sgd_global_norm_clip": lambda: sgd_global_norm_clip(harness["fluid"]),
               "adam_set_gradient_clip": lambda: adam_set_gradient_clip(harness["fluid"]),
               }[optimizer]
        first, last = harness["check_network_convergence"](
            harness[model], feed_dict={"image": img, "label": label}, optimizer=opt, **kwargs)
        first, last = float(np.mean(first)), float(np.mean(last))
        assert last < first * 0.995, (model, optimizer, kwargs, first, last)  # it learns
        _RUNS[key] = first, last
        print(f"{model} {optimizer or 'Adam(0.001)'} {kwargs}: loss {first:.6f} -> {last:.6f}")
    return _RUNS[key]


def sgd_global_norm_clip(fluid, clip=True):
    # Paddle 1.8 spelling: grad_clip= on the optimizer, with L2 decay (clip, then decay)
    return fluid.optimizer.SGD(
        learning_rate=0.5, regularization=fluid.regularizer.L2Decay(1e-3),
        grad_clip=fluid.clip.GradientClipByGlobalNorm(clip_norm=0.05) if clip else None)


def adam_set_gradient_clip(fluid):
    # the older spelling: a program-wide clip set before minimize
    fluid.clip.set_gradient_clip(fluid.clip.GradientClipByNorm(clip_norm=0.01))
    return fluid.optimizer.Adam(learning_rate=0.01)


def assert_same(a, b, first_delta, last_delta):
    assert abs(a[0] - b[0]) <= first_delta, (a, b)
    assert abs(a[1] - b[1]) <= last_delta, (a, b)


def test_single_device_equals_data_parallel_on_four_places(harness):
    """test_parallel_executor_mnist's simple_fc_parallel_accuracy: 1e-6 on both losses."""
    single = converge(harness, "simple_fc_net", use_parallel_executor=False)
    parallel = converge(harness, "simple_fc_net")
    assert_same(single, parallel, 1e-6, 1e-6)


@pytest.mark.filterwarnings("ignore:set_gradient_clip is deprecated")
@pytest.mark.parametrize("optimizer,unclipped", [("sgd_global_norm_clip", "sgd_l2"),
                                                 ("adam_set_gradient_clip", "adam")])
def test_clipped_single_device_equals_data_parallel(harness, optimizer, unclipped):
    """fluid.clip on four places clips the all-reduced gradient, as on one device."""
    single = converge(harness, "simple_fc_net", optimizer, use_parallel_executor=False)
    parallel = converge(harness, "simple_fc_net", optimizer)
    assert_same(single, parallel, 1e-6, 1e-6)
    free = converge(harness, "simple_fc_net", unclipped)
    assert abs(free[1] - parallel[1]) > 1e-3, (free, parallel)  # the clip is in effect


@pytest.mark.parametrize("model", ["simple_fc_net", "fc_with_batchnorm"])
def test_reduce_equals_all_reduce(harness, model):
    """_compare_reduce_and_allreduce: first loss within 1e-6, last within 1e-4."""
    all_reduce = converge(harness, model)
    reduce = converge(harness, model, use_reduce=True)
    assert_same(all_reduce, reduce, 1e-6, 1e-4)


@pytest.mark.parametrize("model", ["simple_fc_net", "fc_with_batchnorm"])
def test_fuse_elewise_add_act_equals_unfused(harness, model):
    """test_fuse_elewise_add_act_pass: 1e-6 on both losses."""
    plain = converge(harness, model)
    fused = converge(harness, model, fuse_elewise_add_act_ops=True)
    assert_same(plain, fused, 1e-6, 1e-6)


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
def test_fuse_all_optimizer_ops_equals_unfused(harness, optimizer):
    """test_fuse_optimizer_pass: 1e-6 on both losses, for SGD, Momentum and Adam."""
    plain = converge(harness, "fc_with_batchnorm", optimizer)
    fused = converge(harness, "fc_with_batchnorm", optimizer, fuse_all_optimizer_ops=True)
    assert_same(plain, fused, 1e-6, 1e-6)


@pytest.mark.parametrize("model", ["simple_fc_net", "fc_with_batchnorm"])
def test_fuse_all_reduce_ops_equals_unfused(harness, model):
    """test_fuse_all_reduce_pass: 1e-6 on both losses."""
    plain = converge(harness, model)
    fused = converge(harness, model, fuse_all_reduce_ops=True)
    assert_same(plain, fused, 1e-6, 1e-6)


@pytest.mark.parametrize("option", ["enable_inplace", "use_ir_memory_optimize",
                                    "enable_sequential_execution", "use_fast_executor"])
def test_memory_and_scheduling_options_equal_plain(harness, option):
    """test_ir_inplace_pass, test_ir_memory_optimize_pass, sequential execution and the
    experimental executor (ExecutionStrategy): none of them changes a value."""
    plain = converge(harness, "fc_with_batchnorm")
    other = converge(harness, "fc_with_batchnorm", **{option: True})
    assert_same(plain, other, 1e-6, 1e-6)


def test_shared_embedding_single_device_equals_data_parallel(harness):
    """word2vec's param_attr='shared_w' (four sparse lookups, one table): one device, four
    places and fused SGD with fused all-reduce agree (the chapter test covers dense)."""
    model = "ngram_net"
    single = converge(harness, model, "sgd", use_parallel_executor=False)
    parallel = converge(harness, model, "sgd")
    fused = converge(harness, model, "sgd", fuse_all_optimizer_ops=True,
                     fuse_all_reduce_ops=True)
    assert_same(single, parallel, 1e-6, 1e-6)
    assert_same(parallel, fused, 1e-6, 1e-6)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_sparse_embedding_fused_optimizer_and_data_parallel(harness, optimizer):
    """A sparse embedding gradient (rows) with fuse_all_optimizer_ops, and on one device vs
    four places, as test_fuse_optimizer_pass's sparse cases do."""
    single = converge(harness, "sparse_embedding_net", optimizer, use_parallel_executor=False)
    parallel = converge(harness, "sparse_embedding_net", optimizer)
    fused = converge(harness, "sparse_embedding_net", optimizer, fuse_all_optimizer_ops=True)
    assert_same(single, parallel, 1e-6, 1e-6)
    assert_same(parallel, fused, 1e-6, 1e-6)


@pytest.mark.slow
def test_se_resnext_reduce_and_fused_equal_all_reduce(harness):
    """The seresnext tests at toy size: Reduce vs AllReduce, and every fusion and in-place
    at once vs none (Momentum with cosine_decay and L2Decay, as seresnext_net trains)."""
    all_reduce = converge(harness, "se_resnext_small", "se_resnext")
    reduce = converge(harness, "se_resnext_small", "se_resnext", use_reduce=True)
    assert_same(all_reduce, reduce, 1e-6, 1e-4)
    fused = converge(harness, "se_resnext_small", "se_resnext", fuse_elewise_add_act_ops=True,
                     fuse_all_optimizer_ops=True, fuse_all_reduce_ops=True,
                     enable_inplace=True)
    assert_same(all_reduce, fused, 1e-6, 1e-6)


def test_parallel_executor_with_per_device_feeds_equals_one_device(harness):
    """fluid.ParallelExecutor fed by DataFeeder.decorate_reader(multi_devices=True) (one
    minibatch per place) trains as one device on the same minibatches put together."""
    img, label = harness["init_data"](batch_size=128)

    def reader():
        yield from zip(img, label)

    parallel = harness["train_with_feeder"](harness["simple_fc_net"], reader)
    single = harness["train_with_feeder"](harness["simple_fc_net"], reader,
                                          use_parallel_executor=False)
    print(f"ParallelExecutor + decorate_reader: loss {parallel[0]:.6f} -> {parallel[-1]:.6f}")
    assert len(parallel) == len(single) == 8  # 128 samples = 4 steps of 4 x 8, two passes
    np.testing.assert_allclose(parallel, single, rtol=0, atol=1e-6)
    assert np.mean(parallel[-2:]) < np.mean(parallel[:2]) * 0.95, parallel
