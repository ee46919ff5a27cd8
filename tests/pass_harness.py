"""Shared by the pass test files: run one pass with fetches kept, golden text showing the
graph before and after with the pass's statistics, and small training-program builders."""

from __future__ import annotations

import graphc as fluid
from graphc import optimizer
from graphc.backends.interpreter import resolve_fetch
from graphc.ir import lower, program_guard, unique_name
from graphc.passes import PassManager, make_pass


def run_pass(name: str, main, fetch, **options):
    """(graph before, graph after, the pass's stats) with ``fetch`` kept alive."""
    before, after = lower(main), lower(main)
    keep = [resolve_fetch(after, f) for f in fetch]
    report = PassManager([make_pass(name, **options)], verify_each=True).run(after, keep=keep)
    return before, after, report.stats()[name]


def golden_text(name: str, before, after, stats) -> str:
    lines = [f"# pass: {name}",
             "# stats: " + (", ".join(f"{k}: {v}" for k, v in sorted(stats.items())) or "-"),
             "# --- before", before.to_text().rstrip(), "# --- after", after.to_text()]
    return "\n".join(lines)


def build(body, train: bool):
    """A (main, startup, loss) triple from ``body()`` -> loss, minimised with SGD if ``train``."""
    main, startup = fluid.Program(), fluid.Program()
    with program_guard(main, startup), unique_name.guard():
        loss = body()
        if train:
            optimizer.SGD(0.1).minimize(loss)
    return main, startup, loss
