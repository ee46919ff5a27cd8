"""Array capacities from the data: a program whose ``lod_tensor_to_array`` takes the default
capacity runs fed sequences longer than it in a copy whose default capacities are bucketed."""

from __future__ import annotations

import re

from ..ops.control_flow.arrays import DEFAULT_ARRAY_CAPACITY
from ..ops.control_flow.defs import DEFAULT_MAX_ITERATIONS
from .lod_tensor import LoDTensor

# an array type of the default capacity in a loop body's text: array<lod1<f32[128,-1,3]>>
_DEFAULT_ARRAY = re.compile(r"(array<(?:lod\d<)?[a-z0-9]+\[)" + str(DEFAULT_ARRAY_CAPACITY)
                            + r"(?=[,\]])")


def steps_bucket(program, feed: dict) -> int | None:
    """The capacity a copy needs (a power of two) when a ``lod_tensor_to_array`` of the
    program has no explicit capacity and a fed LoD holds more steps than the default (its
    longest level-0 sequence); None when the program runs as built."""
    longest = 0  # (the feed first: every run asks, and most feeds are short or dense)
    for value in feed.values():
        if type(value) is LoDTensor and (lengths := value.recursive_sequence_lengths()):
            longest = max(longest, max(lengths[0], default=0))
    if longest <= max(DEFAULT_ARRAY_CAPACITY, DEFAULT_MAX_ITERATIONS) or not any(
            op.type == "lod_tensor_to_array" and not op.attrs.get("capacity")
            for op in program.global_block().ops):
        return None
    return 1 << (longest - 1).bit_length()  # buckets: compiles stay log2-bounded


def widen(block, steps: int) -> list:
    """Give the ops of ``block`` that took the default array capacity or loop bound
    ``steps`` instead (arrays, loops and the types in loop bodies); the ops changed."""
    changed = []
    for op in block.ops:
        attrs, before = op.attrs, dict(op.attrs)
        if op.type in ("lod_tensor_to_array", "write_to_array") and not attrs.get("capacity"):
            attrs["capacity"] = steps
        elif op.type == "empty_array" and attrs["shape"][:1] == [DEFAULT_ARRAY_CAPACITY]:
            attrs["shape"] = [steps, *attrs["shape"][1:]]
        if "max_iterations" in attrs and not attrs["max_iterations"]:  # while, while_grad
            attrs["max_iterations"] = steps
        for key, value in before.items():  # regions' text: their arrays' types
            if isinstance(value, str) and "array<" in value:
                attrs[key] = _DEFAULT_ARRAY.sub(lambda m: m.group(1) + str(steps), value)
        if attrs != before:
            changed.append(op)
    return changed
