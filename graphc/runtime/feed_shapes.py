"""Feeds shaped otherwise than a ``fluid.layers.data`` declaration: Paddle 1.8 checks a fed
shape only where ``need_check_feed`` is set (``fluid.data``), so graphc re-types a copy."""

from __future__ import annotations

import numpy as np

from ..ir.errors import GraphcError
from ..ir.opdef import get_op_def
from ..ir.types import dims_compatible
from .feeds import FeedError, _is_scalar, convert_feed
from .lod_tensor import LoDTensor

__all__ = ["unchecked_feeds"]

_COPIES_PER_PROGRAM = 8  # re-typed copies kept per program (cleared when exceeded)


def _fed_shape(value):
    """The shape of a fed value (an array, a LoDTensor, nested lists), None when it has
    none the feed checks would take (they then name what is wrong)."""
    if _is_scalar(value):  # fed as shape [1] (convert_feed)
        return (1,)
    try:
        shape = getattr(value, "shape", None)
        if callable(shape):  # a LoDTensor's shape()
            shape = shape()
        if shape is None and isinstance(value, list | tuple):
            shape = np.shape(value)
        return None if shape is None else tuple(int(d) for d in shape)
    except (TypeError, ValueError):  # ragged lists, odd objects
        return None


def _dense(value) -> bool:
    """An array, or a LoDTensor whose LoD is empty: a value with no sequences."""
    if isinstance(value, np.ndarray):
        return True
    return type(value) is LoDTensor and not value.recursive_sequence_lengths()


def unchecked_feeds(program, feed: dict):
    """(program, feed) for the feeds of variables declared without the feed check
    (``layers.data``: need_check_feed False), which Paddle 1.8 runs as they are fed.

    An array of another dtype converts to the declared one (graphc compiles declared types):
    floats round to a narrower float type as numpy's ``astype`` (float64 0.1 becomes float32
    0.1; a float64 beyond float32's range becomes inf); a conversion that would change an
    integer (a fraction, out of range) or mix bools and numbers is refused as for a list
    (``convert_feed``). A shape the
    declaration does not admit (a sample fed without its batch dimension) gives a copy of
    the program whose ops take the types inferred from the fed shape; copies are kept on
    the program per (version, shapes).

    A dense array fed to a LoD variable runs with no LoD (Paddle's LoDTensor of an empty
    LoD): the copy declares it dense, of the fed shape, where every op reading it takes
    that (an op that needs sequences refuses, naming itself). A LoD fed to a variable
    declared without one is dropped (its rows run), as before: carrying it would mix LoD
    buffers with the dense rows beside them (concat of a fed user id with dense features)."""
    block = program.global_block()
    changes = {}
    for name, value in feed.items():
        var = block.vars.get(name)
        if var is None or not var.is_data or var.shape is None:
            continue
        if var.lod_level:  # a dense array for a LoD variable: Paddle runs it with no LoD
            shape = _fed_shape(value) if _dense(value) else None
            if shape is not None and 0 not in shape:
                changes[name] = (shape, 0)
            continue
        if var.need_check_feed:
            continue
        if isinstance(value, np.ndarray) and value.dtype != np.dtype(var.dtype) and \
                var.dtype != "bfloat16":
            feed = {**feed, name: convert_feed(name, value, var.dtype)}
        shape = _fed_shape(value)
        if shape is not None and 0 not in shape and \
                not dims_compatible(shape, tuple(var.shape)):
            changes[name] = (shape, 0)
    if not changes:
        return program, feed
    key = (program.version, tuple(sorted(changes.items())))
    copies = program.__dict__.setdefault("_feed_shaped", {})
    hit = copies.get(key)
    if hit is None:
        if len(copies) >= _COPIES_PER_PROGRAM:
            copies.clear()
        hit = _retyped(program, changes)
        copies[key] = hit
    return hit, feed


def _retyped(program, changes: dict):
    """A copy of ``program`` whose fed variables have the shapes in ``changes`` and whose
    ops' outputs take the types inferred from them, in program order."""
    def refused(why: str) -> FeedError:
        name, (shape, _level) = next(iter(changes.items()))
        declared_var = program.global_block().var(name)
        declared = list(declared_var.shape)
        if declared_var.lod_level:
            return FeedError(f"feed '{name}' is declared with lod_level="
                             f"{declared_var.lod_level} but fed a dense array of shape "
                             f"{list(shape)}; "
                             f"Paddle 1.8 runs it with an empty LoD, and graphc re-types the "
                             f"program for it, but {why}; give a LoDTensor "
                             f"(fluid.create_lod_tensor(data, recursive_seq_lens, place)) or "
                             f"feed through a DataFeeder")
        return FeedError(f"feed '{name}' has shape {list(shape)} but the program declares "
                         f"{declared} (-1 matches any size); Paddle 1.8 runs a layers.data "
                         f"variable with the shape fed, and graphc re-types the program for "
                         f"it, but {why}")

    if any(b.ops for b in program.blocks[1:]):
        raise refused("not one with ops outside the global block")
    copy = program.clone()
    block = copy.global_block()
    for name, (shape, level) in changes.items():  # (level: 0, a LoD variable fed dense)
        var = block.var(name)
        var._set_type(shape, lod_level=level)
        var.need_check_feed = True  # the copy is made for exactly this shape
    for op in block.ops:
        where = op.where
        opdef = get_op_def(op.type, where)
        ins = {slot: [block.var(n).type for n in names] for slot, names in op.inputs.items()}
        try:
            inferred = opdef.infer_types(ins, op.attrs, where)
        except GraphcError as exc:  # a shape error, or an op that cannot take the type
            raise refused(f"then {exc}") from None
        for slot, names in op.outputs.items():
            for n, t in zip(names, inferred.get(slot, ())):
                var = block.var(n)
                if not var.persistable:
                    var._set_type(t.shape, t.dtype, t.lod_level, t.array, t.element_lod)
    copy._bump()
    return copy
