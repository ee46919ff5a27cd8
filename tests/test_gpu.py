"""On a GPU: Fluid programs on CUDAPlace give the CPU's numbers (float32 products at full
precision, as Paddle's), AMP float16 trains, data parallelism and the predictor run there.

Marked ``gpu``: deselected where JAX has no GPU backend (tests/conftest.py), run on one.
"""

from __future__ import annotations

import numpy as np
import pytest

import graphc.fluid as fluid

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(300)]


def _gpu():
    import jax
    return jax.devices("gpu")[0]


def _net(seed=5):
    """conv + batch_norm + fc classifier trained with Momentum (a small image model)."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        img = fluid.data("img", [-1, 3, 16, 16], "float32")
        label = fluid.data("label", [-1, 1], "int64")
        h = fluid.layers.conv2d(img, 8, 3, padding=1, act=None)
        h = fluid.layers.batch_norm(h, act="relu")
        h = fluid.layers.pool2d(h, 2, "max", 2)
        h = fluid.layers.fc(h, 64, act="tanh")
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(
            fluid.layers.fc(h, 10), label))
        fluid.optimizer.Momentum(0.05, 0.9).minimize(loss)
    return main, startup, loss


def _batches(n=6, batch=32):
    rng = np.random.default_rng(0)
    return [{"img": rng.standard_normal((batch, 3, 16, 16)).astype("float32"),
             "label": rng.integers(0, 10, (batch, 1)).astype("int64")} for _ in range(n)]


def _train(place, compile_for=None):
    main, startup, loss = _net()
    exe, scope = fluid.Executor(place), fluid.Scope()
    exe.run(startup, scope=scope)
    program = main if compile_for is None else compile_for(main, loss)
    losses = [float(np.asarray(exe.run(program, feed=b, fetch_list=[loss], scope=scope)[0])
                    .reshape(-1)[0]) for b in _batches()]
    params = {p.name: scope.whole(p.name) for p in main.all_parameters()}  # as held
    return losses, params


def test_cuda_is_reported_and_places_are_the_gpus():
    assert fluid.is_compiled_with_cuda()
    places = fluid.cuda_places()
    assert places and places[0] == fluid.CUDAPlace(0)
    assert fluid.CUDAPlace(0).jax_device() == _gpu()


def test_training_on_cuda_place_equals_the_cpu_and_state_stays_on_the_gpu():
    cpu_losses, cpu_params = _train(fluid.CPUPlace())
    gpu_losses, gpu_params = _train(fluid.CUDAPlace(0))
    assert gpu_losses[-1] < gpu_losses[0]
    # summation orders differ between the two backends; products are full float32 on both
    np.testing.assert_allclose(gpu_losses, cpu_losses, rtol=2e-5)
    for name, value in gpu_params.items():
        assert value.devices() == {_gpu()}, name
        np.testing.assert_allclose(np.asarray(value), np.asarray(cpu_params[name]),
                                   rtol=1e-4, atol=1e-5, err_msg=name)


def _fc_error(monkeypatch, precision: str | None) -> float:
    """Largest relative error of a 1024-wide fc on the GPU against float64 NumPy."""
    if precision:
        monkeypatch.setenv("GRAPHC_MATMUL_PRECISION", precision)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [-1, 1024], "float32")
        y = fluid.layers.fc(x, 256, bias_attr=False, param_attr="w")
    exe, scope = fluid.Executor(fluid.CUDAPlace(0)), fluid.Scope()
    exe.run(startup, scope=scope)
    xs = np.random.default_rng(1).standard_normal((64, 1024)).astype("float32")
    (got,) = exe.run(main, feed={"x": xs}, fetch_list=[y], scope=scope)
    want = xs.astype("float64") @ np.asarray(scope["w"], "float64")
    return float(np.max(np.abs(got - want)) / np.max(np.abs(want)))


def test_float32_products_are_full_precision_unless_asked_otherwise(monkeypatch):
    full = _fc_error(monkeypatch, None)
    assert full < 1e-5, full
    tf32 = _fc_error(monkeypatch, "tensorfloat32")
    assert tf32 > 10 * full, (tf32, full)  # the setting reaches graphc's own products


def test_data_parallel_over_the_cuda_places_equals_a_plain_run():
    plain, _ = _train(fluid.CUDAPlace(0))

    def parallel(main, loss):
        return fluid.CompiledProgram(main).with_data_parallel(
            loss_name=loss.name, places=fluid.cuda_places())

    mapped, params = _train(fluid.CUDAPlace(0), parallel)
    np.testing.assert_allclose(mapped, plain, rtol=2e-5)
    assert all(v.devices() <= set(p.jax_device() for p in fluid.cuda_places())
               for v in params.values())


def test_amp_float16_trains_on_the_gpu_as_float32_does():
    import graphc.amp

    from graphc.strategy import BuildStrategy
    results = {}
    for amp in (False, True):
        main, startup, loss = _net()
        bs = BuildStrategy(amp=amp, amp_configs={"dtype": "float16"})
        if amp:
            graphc.amp.init_state(startup, bs)
        exe, scope = fluid.Executor(fluid.CUDAPlace(0)), fluid.Scope()
        exe.run(startup, scope=scope)
        compiled = fluid.CompiledProgram(main, build_strategy=bs)
        batches = _batches(2)  # random labels: learnable only by fitting these two batches
        for _ in range(15):
            for b in batches:
                exe.run(compiled, feed=b, fetch_list=[loss], scope=scope)
        (last,) = exe.run(compiled, feed=batches[0], fetch_list=[loss], scope=scope)
        results[amp] = float(np.asarray(last).reshape(-1)[0])
    assert results[False] < 1.0  # it fitted them (log 10 = 2.3 at the start)
    assert abs(results[True] - results[False]) <= 0.05 * results[False] + 0.01, results


def test_predictor_on_the_gpu_equals_the_cpu_predictor(tmp_path):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.scope_guard(fluid.core.Scope()), fluid.program_guard(main, startup), \
            fluid.unique_name.guard():
        x = fluid.data("x", [-1, 16], "float32")
        out = fluid.layers.fc(fluid.layers.fc(x, 32, act="relu"), 4, act="softmax")
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
        fluid.io.save_inference_model(str(tmp_path), ["x"], [out], exe)
    xs = np.random.default_rng(2).standard_normal((8, 16)).astype("float32")
    got = {}
    for gpu in (False, True):
        config = fluid.core.AnalysisConfig(str(tmp_path))
        if gpu:
            config.enable_use_gpu(100, 0)
        else:
            config.disable_gpu()
        predictor = fluid.core.create_paddle_predictor(config)
        (result,) = predictor.run([fluid.core.PaddleTensor(xs)])
        got[gpu] = result.as_ndarray()
    np.testing.assert_allclose(got[True], got[False], rtol=1e-5, atol=1e-6)

