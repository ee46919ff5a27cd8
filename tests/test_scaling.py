"""A 20k-op program lowers, verifies, prints and parses back whole, in program order.

No timings here (see benchmarks/bench_lowering.py); this only proves large graphs work.
"""

from __future__ import annotations

import re

import graphc
from graphc import layers

NUM_OPS = 20_000
_OP_LINE = re.compile(r"^  (?:%\S+: \S+|\(.*\)) = ([a-z0-9_]+)\(", re.M)


def _long_chain(num_ops: int) -> graphc.Program:
    main = graphc.default_main_program()
    h = layers.data("x", [-1, 4])
    blocks, extra = divmod(num_ops, 3)
    for _ in range(blocks):
        h = layers.fc(h, 4, act="relu")  # mul, elementwise_add, relu
    for _ in range(extra):
        h = layers.scale(h, 0.5)
    assert main.num_ops == num_ops
    return main


def test_a_20k_op_program_lowers_prints_and_parses_back_whole():
    program = _long_chain(NUM_OPS)
    graph = graphc.lower(program)
    assert graph.num_ops == NUM_OPS
    graph.verify()

    text = graph.to_text()
    printed = _OP_LINE.findall(text)
    assert len(printed) == NUM_OPS
    assert printed == [op.type for op in program.global_block().ops]

    parsed = graphc.parse(text)
    assert parsed.num_ops == NUM_OPS
    assert parsed.to_text() == text
