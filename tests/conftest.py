"""Shared test set-up: hypothesis profiles (bounded in CI, more examples locally) and
fresh default programs / name counters for every test."""

from __future__ import annotations

import os

import jax
import pytest
from hypothesis import HealthCheck, settings

# Many tests compile the same small programs; XLA's CPU compile dominates their time, so
# share compiled executables across tests and xdist workers through JAX's persistent cache.
# Data-parallel tests need several devices; XLA fixes the CPU count when its backend starts,
# so every test process gets 8 (single-device tests use the first).
jax.config.update("jax_num_cpu_devices", 8)
# The suite compiles thousands of small programs and runs each a few steps: LLVM's -O0
# codegen saves about a sixth of the suite's CPU time (test_backend_equality and
# test_control_flow_cond: 110.6 -> 92.9 CPU s). graphc's code and XLA's HLO passes are the
# same at every level; users' programs keep XLA's default. An explicit level in XLA_FLAGS
# wins (read when the backend starts, on the next line).
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                               + " --xla_backend_optimization_level=0").strip()
jax.devices()  # start the backend now: a test setting CPU_NUM must not pick the count for
# the tests that follow it in this worker (xdist orders tests differently run to run)
_CACHE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      ".pytest_cache", "jax-compilation")
jax.config.update("jax_compilation_cache_dir", _CACHE)
# subprocesses (launched jobs, the citizenship check) use the same cache, never the user's
# home: graphc reads GRAPHC_COMPILATION_CACHE when it first compiles
os.environ.setdefault("GRAPHC_COMPILATION_CACHE", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

settings.register_profile("ci", max_examples=40, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=300, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(autouse=True)
def fresh_programs():
    """Each test builds into new default programs with name counters from zero."""
    import graphc
    from graphc.ir import default_programs as program_mod

    main, startup = graphc.Program(), graphc.Program()
    old_main = program_mod.switch_main_program(main)
    old_startup = program_mod.switch_startup_program(startup)
    with graphc.unique_name.guard():
        yield
    program_mod.switch_main_program(old_main)
    program_mod.switch_startup_program(old_startup)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Keep ``--dist loadgroup``'s ``xdist_group`` marks in force (the ``mpi`` jobs one
    after another, a module's shared runs on one worker). xdist 3.8 tags a grouped test by
    appending ``@group`` to ``item._nodeid``, which pytest 9.2 no longer reads (node ids are
    structured, pytest-xdist issue 1386): every group was silently spread over both
    workers. Where the tag did not take, set it on the structured id instead."""
    _deselect_gpu_tests_without_a_gpu(config, items)
    if not getattr(config.option, "loadgroup", False):
        return  # not an xdist worker of a loadgroup run
    for item in items:
        groups = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                         for m in item.iter_markers("xdist_group")})
        if groups and not item.nodeid.endswith("@" + "_".join(groups)):
            from _pytest.nodeid import NodeId
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(groups)}")


def _deselect_gpu_tests_without_a_gpu(config, items) -> None:
    """Tests marked ``gpu`` need a JAX GPU backend: where there is none (CI's machines) they
    are deselected, and the run's summary counts them, rather than skipped one by one."""
    try:
        have_gpu = bool(jax.devices("gpu"))
    except RuntimeError:
        have_gpu = False
    if have_gpu:
        return
    gpu = [item for item in items if item.get_closest_marker("gpu")]
    if gpu:
        items[:] = [item for item in items if not item.get_closest_marker("gpu")]
        config.hook.pytest_deselected(items=gpu)
