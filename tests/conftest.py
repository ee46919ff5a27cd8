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
