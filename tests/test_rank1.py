"""lod_rank_table below level 0 (rank1, issue 26): Paddle's table over every entry of a deeper
level of the batch, against a NumPy reference, on the interpreter and jitted."""

from __future__ import annotations

import numpy as np
import pytest

import graphc.fluid as fluid
from graphc import lower
from graphc.backends.interpreter import run_graph
from graphc.runtime.lod import create_lod_tensor
from graphc.testing.lod import as_feed

# three levels, Paddle's test_lod_rank_table batch; a 2-level one with an empty entry
CASES = [([[1, 2], [5, 1, 1], [3, 1, 5, 1, 3, 3, 1]], 1),
         ([[1, 2], [5, 1, 1], [3, 1, 5, 1, 3, 3, 1]], 2),
         ([[2, 0, 3], [1, 4, 2, 0, 2]], 1)]


def rank_items(lengths, level):
    """Paddle's LoDRankTable at ``level``: (entry, length) over that level's entries of the
    whole batch, longest first, ties in batch order (a stable sort)."""
    lens = lengths[level]
    return sorted(enumerate(lens), key=lambda item: -item[1])


@pytest.fixture(scope="module")
def programs():
    built = {}
    for depth in (2, 3):
        for level in range(1, depth):
            main = fluid.Program()
            with fluid.program_guard(main, fluid.Program()):
                x = fluid.layers.data(name="x", shape=[2], dtype="float32", lod_level=depth)
                table = fluid.layers.control_flow.lod_rank_table(x, level=level)
                table.persistable = True
                longest = fluid.layers.control_flow.max_sequence_len(table)
            built[depth, level] = main, table, longest
    return built


@pytest.mark.parametrize("lengths,level", CASES)
def test_a_deeper_level_table_equals_paddles_items(programs, lengths, level):
    main, table, longest = programs[len(lengths), level]
    rows = sum(lengths[-1])
    feed = create_lod_tensor(np.arange(2 * rows, dtype="float32").reshape(rows, 2), lengths)
    want = rank_items(lengths, level)
    scope = fluid.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    (jit,) = exe.run(main, feed={"x": feed}, fetch_list=[longest], scope=scope)
    assert scope.find_var(table.name).get_lod_rank_table().items() == want
    assert int(np.asarray(jit)[0]) == max(lengths[level])
    _, (got_table, got_len) = run_graph(lower(main), {}, {"x": as_feed(main, "x", feed)},
                                        [table.name, longest.name])
    got_table = np.asarray(got_table)
    # the buffer's unused entries follow the real ones, as length -1
    assert [tuple(r) for r in got_table[:len(want)].tolist()] == want
    assert (got_table[len(want):, 1] == -1).all()
    assert int(np.asarray(got_len)[0]) == max(lengths[level])
