"""Paddle-style unique names: ``generate("fc")`` gives fc_0, fc_1, ...; ``guard()`` resets.

Layer helpers name parameters ``fc_0.w_0`` by generating ``fc`` and then ``fc_0.w``.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict


class UniqueNameGenerator:
    def __init__(self, prefix: str = ""):
        self.prefix = prefix
        self.ids: defaultdict[str, int] = defaultdict(int)

    def __call__(self, key: str) -> str:
        n = self.ids[key]
        self.ids[key] = n + 1
        return f"{self.prefix}{key}_{n}"


# process: Paddle's unique_name generator
_generator = UniqueNameGenerator()


def generate(key: str) -> str:
    """A new name ``key_N``, N counting up per key."""
    return _generator(key)


def switch(new_generator: UniqueNameGenerator | None = None,
           new_para_name_checker=None) -> UniqueNameGenerator:
    """Make ``new_generator`` (a fresh one if None) current; returns the previous one.
    ``new_para_name_checker`` (Paddle 1.8's dygraph parameter-name checker) is accepted and
    unused: graphc has no dygraph mode, whose parameter names it checks."""
    global _generator
    old, _generator = _generator, new_generator or UniqueNameGenerator()
    return old


@contextlib.contextmanager
def guard(new_generator: UniqueNameGenerator | str | None = None):
    """Fresh name counters inside the block (a string becomes a name prefix)."""
    if isinstance(new_generator, str):
        new_generator = UniqueNameGenerator(new_generator)
    old = switch(new_generator)
    try:
        yield
    finally:
        switch(old)
