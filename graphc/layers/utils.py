"""``fluid.layers.utils``: Paddle's nested-structure helpers (is_sequence, flatten,
pack_sequence_as, map_structure) over lists, tuples and dicts, for ported RNN/decoder code."""

from __future__ import annotations

from collections.abc import Sequence

from ..ir.errors import ProgramError

__all__ = ["is_sequence", "flatten", "pack_sequence_as", "map_structure",
           "assert_same_structure"]


def is_sequence(seq) -> bool:
    """A list, tuple or dict is a nest level; a string (or anything else) is a leaf."""
    if isinstance(seq, dict):
        return True
    return isinstance(seq, Sequence) and not isinstance(seq, str | bytes)


def _children(nest) -> list:
    # dicts are walked in sorted key order, as Paddle (and tf.nest) do
    if isinstance(nest, dict):
        return [nest[k] for k in sorted(nest)]
    return list(nest)


def flatten(nest) -> list:
    """The leaves of ``nest``, depth first."""
    if not is_sequence(nest):
        return [nest]
    return [leaf for child in _children(nest) for leaf in flatten(child)]


def _rebuild(like, items: list):
    if isinstance(like, dict):
        return type(like)(zip(sorted(like), items, strict=True))
    if isinstance(like, tuple) and hasattr(like, "_fields"):  # namedtuple
        return type(like)(*items)
    return type(like)(items)


def _pack(structure, leaves: list, start: int):
    if not is_sequence(structure):
        return leaves[start], start + 1
    items = []
    for child in _children(structure):
        item, start = _pack(child, leaves, start)
        items.append(item)
    return _rebuild(structure, items), start


def pack_sequence_as(structure, flat_sequence):
    """``flat_sequence`` (leaves in flatten's order) rebuilt in ``structure``'s shape."""
    flat = list(flat_sequence)
    want = len(flatten(structure))
    if len(flat) != want:
        raise ProgramError(f"pack_sequence_as: the structure has {want} leaves but "
                           f"flat_sequence has {len(flat)}")
    return _pack(structure, flat, 0)[0]


def assert_same_structure(nest1, nest2, check_types: bool = True) -> None:
    if is_sequence(nest1) != is_sequence(nest2):
        raise ProgramError(f"assert_same_structure: {nest1!r} and {nest2!r} differ in nesting")
    if not is_sequence(nest1):
        return
    if check_types and type(nest1) is not type(nest2):
        raise ProgramError(f"assert_same_structure: {type(nest1).__name__} vs "
                           f"{type(nest2).__name__}")
    a, b = _children(nest1), _children(nest2)
    if len(a) != len(b) or (isinstance(nest1, dict) and sorted(nest1) != sorted(nest2)):
        raise ProgramError(f"assert_same_structure: {nest1!r} and {nest2!r} differ in length")
    for x, y in zip(a, b, strict=True):
        assert_same_structure(x, y, check_types)


def map_structure(func, *structure):
    """``func`` applied leaf-wise across structures of the same shape, in that shape."""
    for other in structure[1:]:
        assert_same_structure(structure[0], other, check_types=False)
    leaves = [flatten(s) for s in structure]
    return pack_sequence_as(structure[0], [func(*xs) for xs in zip(*leaves, strict=True)])
