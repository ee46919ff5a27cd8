"""Random programs x random BuildStrategies: the interpreter computes the same fetches and
updated parameters with and without the pipeline (1e-6), every intermediate graph verifies;
the same for random prefixes of the full pass list. About half the programs hold a region
(a run of steps as the body of a scan_layers or while op): passes recurse into it or
decline it (issue 26)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import graphc as fluid
from graphc import optimizer
from graphc.passes import ORDER, all_passes, make_pass, pipeline_for
from graphc.testing import check_pass, random_programs

# The BuildStrategy switches whose passes exist and keep results within 1e-6: amp computes
# in bf16 by design (tests/test_pass_amp.py checks it within bf16 tolerance).
SWITCHES = [field for field, name in ORDER if field and name in all_passes() and name != "amp"]
OPTIMIZERS = {"sgd": lambda: optimizer.SGD(0.1), "momentum": lambda: optimizer.Momentum(0.1, 0.9),
              "adam": lambda: optimizer.Adam(0.01)}


@st.composite
def strategies(draw):
    flags = {f: draw(st.booleans()) for f in SWITCHES}
    return fluid.BuildStrategy(**flags)


def train(gen, opt_name: str):
    with fluid.program_guard(gen.main, gen.startup):
        OPTIMIZERS[opt_name]().minimize(gen.main.global_block().var(gen.loss))


@settings(max_examples=15)
@given(random_programs(max_ops=5, with_loss=True, regions=True), strategies(),
       st.sampled_from(sorted(OPTIMIZERS)))
def test_random_strategies_preserve_training_results(gen, strategy, opt_name):
    train(gen, opt_name)
    check_pass(pipeline_for(strategy, verify_each=True), gen)


@settings(max_examples=10)
@given(random_programs(max_ops=5, regions=True), strategies())
def test_random_strategies_preserve_forward_results(gen, strategy):
    check_pass(pipeline_for(strategy, verify_each=True), gen)


@settings(max_examples=10)
@given(random_programs(max_ops=4, with_loss=True, regions=True), st.data())
def test_random_pass_prefixes(gen, data):
    train(gen, "momentum")
    names = [name for _, name in ORDER if name in all_passes() and name != "amp"]
    prefix = names[:data.draw(st.integers(1, len(names)))]
    check_pass([make_pass(n) for n in prefix], gen)
