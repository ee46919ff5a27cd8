"""Shared test set-up: hypothesis profiles (bounded in CI, more examples locally) and
fresh default programs / name counters for every test."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=40, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=300, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(autouse=True)
def fresh_programs():
    """Each test builds into new default programs with name counters from zero."""
    import graphc
    from graphc.ir import program as program_mod

    main, startup = graphc.Program(), graphc.Program()
    old_main = program_mod.switch_main_program(main)
    old_startup = program_mod.switch_startup_program(startup)
    with graphc.unique_name.guard():
        yield
    program_mod.switch_main_program(old_main)
    program_mod.switch_startup_program(old_startup)
