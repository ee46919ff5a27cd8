"""host25: a one-device step whose checks all left the program returns no empty summary from
its jitted call (one output fewer), while a step with checks in the program keeps its summary
and refusals; graphc's x64 entry points swap the thread's setting and always put it back."""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_executor_fast_path import good_feed, snapshot, trained_classifier

import graphc
from graphc import layers
from graphc.backends.data_checks import DataError
from graphc.backends.precision import with_graphc_x64
from graphc.runtime.executor import Executor


@pytest.fixture(scope="module")
def trained():
    return trained_classifier(3)  # the third run takes the steady function


def _only_step(exe, main, loss):
    (step,) = exe._prepare(main, None, (loss.name,)).steps.values()
    return step


def test_a_host_checked_step_returns_no_summary_and_still_refuses(trained):
    main, loss, scope, exe = trained
    step = _only_step(exe, main, loss)
    assert not step.check_sites and step.host_checks  # the label's check is the host's
    with jax.enable_x64(True):
        outputs = jax.eval_shape(step._jitted, *step.abstract_args(step.feed_shapes))
    assert outputs[3] is None and len(outputs[0]) == len(step.updated_names)
    before = snapshot(scope)
    bad = good_feed(seed=4)
    bad["label"][2, 0] = 9
    with pytest.raises(DataError, match="label"):
        exe.run(main, feed=bad, fetch_list=[loss], scope=scope)
    after = snapshot(scope)
    assert all(np.array_equal(before[n], after[n]) for n in before)  # scope untouched
    got = exe.run(main, feed=good_feed(seed=5), fetch_list=[loss], scope=scope)[0]
    assert np.isfinite(got).all()


def test_a_step_with_checks_in_the_program_keeps_its_summary():
    """An id computed inside the program (not fed) is checked on the device: the summary
    stays an output, and a bad id refuses the run with the scope untouched."""
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        ids = graphc.data("ids", [-1, 1], "int64")
        shifted = layers.elementwise_add(ids, layers.fill_constant([1], "int64", 1))
        out = layers.reduce_sum(layers.embedding(shifted, size=[5, 2]))
    scope, exe = graphc.Scope(), Executor()
    exe.run(startup, scope=scope)
    feed = {"ids": np.array([[0], [3]], np.int64)}
    table = np.asarray(scope[main.all_parameters()[0].name])
    got = exe.run(main, feed=feed, fetch_list=[out], scope=scope)[0]
    np.testing.assert_allclose(got, table[[1, 4]].sum(), rtol=1e-6)
    step = _only_step(exe, main, out)
    assert step.check_sites
    with jax.enable_x64(True):
        outputs = jax.eval_shape(step._jitted, *step.abstract_args(step.feed_shapes))
    assert outputs[3].shape == (len(step.check_sites), 4)
    with pytest.raises(DataError):
        exe.run(main, feed={"ids": np.array([[0], [4]], np.int64)}, fetch_list=[out],
                scope=scope)


def test_x64_entry_points_put_the_setting_back():
    @with_graphc_x64
    def inner():
        return jnp.asarray(np.int64(2**40)).dtype

    @with_graphc_x64
    def fails():
        assert jax.config.jax_enable_x64
        raise ValueError("boom")

    assert inner() == np.int64 and not jax.config.jax_enable_x64
    with pytest.raises(ValueError, match="boom"):
        fails()
    assert jnp.asarray(np.int64(1)).dtype == np.int32  # put back after the error
    with jax.enable_x64(True):  # a caller in x64 stays there
        assert inner() == np.int64 and jax.config.jax_enable_x64
    seen = []
    worker = threading.Thread(target=lambda: seen.append(inner()))
    worker.start()
    worker.join()
    assert seen == [np.int64] and not jax.config.jax_enable_x64
