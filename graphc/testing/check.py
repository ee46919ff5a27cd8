"""check_pass: the property every pass must keep, for graphc's passes and users' own:
the pass leaves a graph that verifies and computes what the interpreter computed before."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..backends.interpreter import RULES, resolve_fetch, run_graph
from ..ir.graph import Graph, lower
from ..passes import Pass, PassManager
from .programs import GeneratedProgram


def feeds_for(gen: GeneratedProgram, batch: int = 3, seed: int = 0) -> dict:
    """Random feeds for a generated program (every -1 becomes ``batch``)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, (shape, dtype) in gen.feeds.items():
        shape = tuple(batch if d == -1 else d for d in shape)
        if dtype.startswith("int"):
            feeds[name] = rng.integers(0, gen.int_feed_high.get(name, 2), shape).astype(dtype)
        else:
            feeds[name] = rng.uniform(-1.0, 1.0, shape).astype(dtype)
    return feeds


def assert_same_results(before: Graph, after: Graph, state: dict, feeds: dict,
                        fetch: Sequence[str], rtol: float = 1e-6, atol: float = 1e-6,
                        step: int = 0) -> None:
    """Both graphs, run by the interpreter from the same state and feeds, agree on every
    fetch and every updated persistable."""
    # An exact check (rtol = atol = 0) runs every rule eagerly, primitive by primitive, as
    # a fused op's unfused parts run: the interpreter's compiled rules let XLA fuse a rule's
    # float32 arithmetic (an ulp of difference), which an exact check would report
    rules = None if rtol == 0 and atol == 0 else RULES
    want_state, want = run_graph(before, state, feeds, fetch, step, rules=rules)
    got_state, got = run_graph(after, state, feeds, fetch, step, rules=rules)
    for name, a, b in zip(fetch, got, want):
        assert a.dtype == b.dtype and a.shape == b.shape, (name, a.dtype, b.dtype)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol, err_msg=f"fetch {name}")
    assert got_state.keys() == want_state.keys()
    for name in want_state:
        np.testing.assert_allclose(got_state[name], want_state[name], rtol=rtol, atol=atol,
                                   err_msg=f"state {name}")


def check_pass(passes: Pass | Sequence[Pass] | PassManager, gen: GeneratedProgram,
               fetch: Sequence[str] | None = None, seed: int = 0, rtol: float = 1e-6,
               atol: float = 1e-6):
    """Apply the pass(es) to ``gen``'s graph with the fetch targets kept, verify after each,
    and compare interpreter results before and after. Returns the pipeline report.

    Use it inside a hypothesis test over ``random_programs()``::

        @given(random_programs(with_loss=True))
        def test_my_pass(gen):
            check_pass(MyPass(), gen)
    """
    if isinstance(passes, PassManager):
        manager = passes
        manager.verify_each = True
    else:
        manager = PassManager([passes] if isinstance(passes, Pass) else list(passes),
                              verify_each=True)
    fetch = list(gen.fetch if fetch is None else fetch)
    state, _ = run_graph(lower(gen.startup))
    feeds = feeds_for(gen, seed=seed)
    before = lower(gen.main)
    after = lower(gen.main)
    keep = [resolve_fetch(after, f) for f in fetch]
    report = manager.run(after, keep=keep)
    assert_same_results(before, after, state, feeds, fetch, rtol, atol)
    return report
