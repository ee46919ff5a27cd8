"""graphc.fluid against Paddle Fluid's public API list (../shared/reference/paddle-fluid-api.txt):
the measuring tool's own rules, and a ratchet so that coverage only grows."""

from __future__ import annotations

import pytest

from graphc.tools import api_coverage as cov

SAMPLE = """\
# a comment line
paddle.fluid.layers.fc(input, size, num_flatten_dims=1, param_attr=None, act=None, name=None)
paddle.fluid.layers.pad(x, paddings, pad_value=0.0, name=None)
paddle.fluid.Executor [class paddle.fluid.executor.Executor]
paddle.fluid.ExecutionStrategy.__init__(...)
paddle.fluid.layers.concat(input, axis=0, name=None)
paddle.fluid.layers.fill(shape=[1, 2], value='a,b', *args, **kwargs)
# Changed in 1.8
paddle.fluid.layers.concat(input, axis=0, name=None, extra=None)  # python/paddle/x.py
"""


def test_parse_list_keeps_the_last_signature_and_splits_defaults_at_top_level_commas():
    entries = {e.name: e for e in cov.parse_list(SAMPLE)}
    assert list(entries) == ["paddle.fluid.layers.fc", "paddle.fluid.layers.pad",
                             "paddle.fluid.Executor", "paddle.fluid.ExecutionStrategy.__init__",
                             "paddle.fluid.layers.concat", "paddle.fluid.layers.fill"]
    assert entries["paddle.fluid.layers.concat"].args == ("input", "axis", "name", "extra")
    fill = entries["paddle.fluid.layers.fill"]
    assert fill.args == ("shape", "value") and fill.positional == 2
    assert entries["paddle.fluid.Executor"].args is None
    assert entries["paddle.fluid.ExecutionStrategy.__init__"].args is None
    assert entries["paddle.fluid.ExecutionStrategy.__init__"].module == "paddle.fluid"
    assert entries["paddle.fluid.layers.fc"].module == "paddle.fluid.layers"


def test_compare_names_what_differs():
    entry = cov.Entry("paddle.fluid.layers.f", ("x", "y", "name"), 3)

    def same(x, y, name=None, extra=1):
        pass

    def swapped(y, x, name=None):
        pass

    def lacks(x, y):
        pass

    def needs_more(x, y, name=None, *, required):
        pass

    def open_kwargs(x, y, **kwargs):
        pass

    assert cov.compare(entry, same) == ""
    assert "positional" in cov.compare(entry, swapped)
    assert "positional" in cov.compare(entry, lacks)
    keyword = cov.Entry("paddle.fluid.layers.f", ("x", "y", "name"), 2)  # name after a `*`
    assert "does not take ['name']" in cov.compare(keyword, lacks)
    assert "requires ['required']" in cov.compare(entry, needs_more)
    assert cov.compare(keyword, open_kwargs) == ""  # **kwargs takes the keyword-only name
    assert "positional" in cov.compare(entry, open_kwargs)  # but not as a third positional


def test_compare_drops_self_of_methods():
    entry = cov.Entry("paddle.fluid.Program.block", ("self", "index"), 2)

    class Program:
        def block(self, index):
            pass

    assert cov.compare(entry, Program.block) == ""
    assert cov.compare(entry, Program().block) == ""


@pytest.mark.parametrize("name, status", [
    ("paddle.fluid.layers.fc", "same"),
    ("paddle.fluid.layers.nn.fc", "same"),  # a submodule reached by import, not attribute
    ("paddle.fluid.load_op_library", "refused"),  # graphc lacks it on purpose, with advice
    ("paddle.fluid.layers.no_such_layer_anywhere", "absent"),
    ("paddle.fluid.no_such_module.thing", "absent"),
])
def test_classify_real_names(name, status):
    entry = cov.Entry(name, None)
    assert cov.classify(entry).status == status, cov.classify(entry)


# What graphc.fluid offers today (dygraph and contrib left out). Raise these numbers as the
# surface grows; lowering one needs a reason in the commit that does it.
FLOOR_SAME = 974  # issue 24 PipelineOptimizer (+3), issue 27 role makers (+29)
CEILING_ABSENT = 0


def test_coverage_of_the_reference_list_never_shrinks(capsys):
    if not cov.DEFAULT_LIST.exists():
        pytest.fail(f"the reference list is missing: {cov.DEFAULT_LIST} (../shared beside "
                    "the checkout)")
    results = cov.measure()
    with capsys.disabled():
        print("\n" + cov.format_table(results))
    statuses = [r.status for r in results]
    assert statuses.count("same") >= FLOOR_SAME
    assert statuses.count("absent") <= CEILING_ABSENT
