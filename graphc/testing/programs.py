"""Hypothesis strategies for random *valid* Paddle-style programs, built through graphc.layers.

Round-trip, verifier, pass and backend property tests all draw their programs from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from hypothesis import strategies as st

from .. import layers
from ..ir import Graph, Program, lower, program_guard, unique_name
from ..ir.program import Variable
from ..ir.types import FLOAT_DTYPES
from .program_builder import DEFAULT_DTYPES, _Builder
from .program_regions import close_region, open_region
from .program_steps import _STEPS, STEP_NAMES


@dataclass
class GeneratedProgram:
    """A drawn program pair and what it takes to run it.

    ``feeds`` maps each data name to ``(shape, dtype)``; every -1 is the same batch size
    at run time, and integer feeds (ids, labels) must stay below ``int_feed_high[name]``.
    ``fetch`` lists the variables no later layer read; ``loss`` (also fetched) is a ``[1]``
    mean when one was asked for.
    """

    main: Program
    startup: Program
    feeds: dict[str, tuple[tuple[int, ...], str]]
    fetch: list[str]
    loss: str | None = None
    int_feed_high: dict[str, int] = field(default_factory=dict)
    steps: list[str] = field(default_factory=list)  # layer steps taken, for failure reports

    def graph(self) -> Graph:
        return lower(self.main)

    def startup_graph(self) -> Graph:
        return lower(self.startup)

    def __repr__(self) -> str:
        return (f"GeneratedProgram(steps={self.steps}, feeds={self.feeds}, "
                f"fetch={self.fetch}, loss={self.loss})\n{self.main.to_text()}")

    def _repr_pretty_(self, p, cycle) -> None:  # what hypothesis shows for a failing example
        p.text(repr(self))


def _computed_from_parameters(main: Program) -> set[str]:
    block = main.global_block()
    reached = {p.name for p in block.all_parameters() if p.trainable}
    for op in block.ops:
        if reached.intersection(op.input_arg_names):
            reached.update(op.output_arg_names)
    return reached


def _usable(names: list[str], pool: list[Variable]) -> list[str]:
    return [n for n in names if _STEPS[n][1] is None or any(_STEPS[n][1](v) for v in pool)]


class _Probe:
    """Stands in for a feed of a given rank when asking steps what they would accept."""

    def __init__(self, rank: int):
        self.shape, self.dtype = (-1,) + (2,) * (rank - 1), "float32"
        self.ndim = rank


def _ranks_accepted(names: list[str]) -> list[int]:
    return [r for r in (2, 3, 4) if any(_STEPS[n][1] is None or _STEPS[n][1](_Probe(r))
                                        for n in names)]


def random_programs(max_ops: int = 8, min_ops: int = 1, steps: Sequence[str] | None = None,
                    with_loss: bool | None = None,
                    cast_dtypes: Sequence[str] = DEFAULT_DTYPES, regions: bool = False
                    ) -> st.SearchStrategy[GeneratedProgram]:
    """Draw a valid (main, startup) program pair built with graphc's layer functions.

    ``max_ops``/``min_ops`` bound the number of layer calls (one call appends 1-4 ops:
    fc adds mul + elementwise_add + an activation). ``steps`` restricts the layer kinds to
    names from ``STEP_NAMES``; ``with_loss`` forces (True) or forbids (False) a final
    ``mean`` loss (None: drawn); ``cast_dtypes`` are the float dtypes casts and feeds may
    use. Feeds have a batch dimension of -1 and other dims in 1..6. Names are Paddle's
    and deterministic: the program is built inside ``unique_name.guard()``. With
    ``regions`` a drawn run of steps may become the body of one ``scan_layers`` op
    (program_regions.py), listed in ``steps`` as ``scan_layers(...)``.
    """
    names = list(steps) if steps is not None else list(STEP_NAMES)
    unknown = sorted(set(names) - set(_STEPS))
    if unknown:
        raise ValueError(f"unknown steps {unknown}; expected names from {STEP_NAMES}")
    if not set(cast_dtypes) <= FLOAT_DTYPES:
        raise ValueError(f"cast_dtypes must be float dtypes, got {list(cast_dtypes)}")
    if not 0 <= min_ops <= max_ops:
        raise ValueError(f"need 0 <= min_ops <= max_ops, got {min_ops} and {max_ops}")
    return _programs(max_ops, min_ops, names, with_loss, tuple(cast_dtypes), regions)


@st.composite
def _programs(draw, max_ops: int, min_ops: int, names: list[str], with_loss: bool | None,
              cast_dtypes: tuple[str, ...], regions: bool = False) -> GeneratedProgram:
    main, startup = Program(), Program()
    main.random_seed = draw(st.sampled_from([0, 42]))
    b = _Builder(draw, cast_dtypes)
    taken: list[str] = []
    with program_guard(main, startup), unique_name.guard():
        for _ in range(draw(st.integers(1, 2))):
            b.add(b.float_feed())
        n_steps = draw(st.integers(min_ops, max_ops))
        window = None  # [first, last] step of the region, when one is drawn
        if regions and n_steps and draw(st.booleans()):
            first = draw(st.integers(0, n_steps - 1))
            window = (first, draw(st.integers(first, n_steps - 1)))
        for i in range(n_steps):
            if window and i == window[0]:
                region = open_region(b, main.global_block())
            usable = _usable(names, b.pool)
            if not usable:  # e.g. only conv2d asked for and no 4-D tensor yet
                # dims >= 2, as the probes have: split needs one
                b.add(b.float_feed(b.pick(_ranks_accepted(names)), lo=2))
                usable = _usable(names, b.pool)
            name = draw(st.sampled_from(usable))
            build, accepts = _STEPS[name]
            x = None if accepts is None else draw(st.sampled_from(
                [v for v in b.pool if accepts(v)]))
            build(b, x)
            taken.append(name)
            if window and i == window[1]:
                wrapped = close_region(b, region)
                if wrapped:
                    taken.append(wrapped)
        loss = None
        if with_loss if with_loss is not None else draw(st.booleans()):
            # the latest reusable result computed from a trainable parameter, if any, so
            # that minimize() has something to train
            trained = _computed_from_parameters(main)
            target = ([v for v in b.pool if v.name in trained] or b.pool)[-1]
            loss_var = layers.mean(target)
            b.use(target)
            b.add(loss_var)
            loss = loss_var.name
    fetch = list(dict.fromkeys(v.name for v in b.produced
                               if v.name not in b.consumed and v.name not in b.feeds))
    if not fetch:  # only feeds were left unread (no steps ran): fetch the last result
        fetch = [b.produced[-1].name]
    return GeneratedProgram(main, startup, dict(b.feeds), fetch, loss, dict(b.int_feed_high),
                            taken)


def random_graphs(**kwargs) -> st.SearchStrategy[Graph]:
    """Lowered SSA graphs of ``random_programs(**kwargs)`` (same arguments)."""
    return random_programs(**kwargs).map(lambda p: lower(p.main))
