"""Feeds shaped otherwise than a ``fluid.layers.data`` declaration: Paddle 1.8 checks a fed
shape only where ``need_check_feed`` is set (``fluid.data``), so graphc re-types a copy."""

from __future__ import annotations

import numpy as np

from ..ir.retype import ReinferError, apply, reinfer
from ..ir.types import dims_compatible
from .feeds import FeedError, _is_scalar, convert_feed
from .lod_optional import optional_lod_level
from .lod_tensor import LoDTensor
from .step_bucket import steps_bucket, widen

__all__ = ["unchecked_feeds", "unchecked_run"]

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


def unchecked_run(program, compiled, feed):
    """``unchecked_feeds`` for what ``Executor.run`` was given: a Program fed a dict, or a
    one-device CompiledProgram fed a dict or a one-dict list (ELMo's ParallelExecutor on
    one CPU feeds ``[{'init_hiddens': <[256]>}]`` to a ``layers.data`` of shape [1]): the
    compiled program is then re-targeted at the re-typed copy. Data-parallel feeds keep the
    declared shapes: a device's share of a re-typed shape is not defined. Returns
    (program, compiled, feed)."""
    listed = type(feed) in (list, tuple) and len(feed) == 1 and type(feed[0]) is dict
    one = feed[0] if listed else feed
    if type(one) is not dict or not one:
        return program, compiled, feed
    if compiled is None:
        if listed:  # a plain program's one-dict list runs as the dict, unchanged
            return program, None, feed
        program, feed = unchecked_feeds(program, feed)
        return program, None, feed
    if compiled.num_devices != 1 or compiled.exec_strategy.num_iteration_per_run != 1:
        return program, compiled, feed
    retyped, one = unchecked_feeds(program, one)
    if retyped is not program:
        compiled = compiled._for_program(retyped)
    return retyped, compiled, [one] if listed else one


def _demanded(var, value):
    """For a variable declared dense but typed a LoD value by an op that needs sequences
    (graphc/ir/lod_demand.py): the (shape, level) of a copy for a LoDTensor of more levels
    or other rows than that op asked for (Paddle runs the LoD and rows fed), else None."""
    if getattr(var, "lod_demanded_by", None) is None or type(value) is not LoDTensor:
        return None
    level, shape = len(value.recursive_sequence_lengths()), _fed_shape(value)
    rows = tuple(var.shape[1:]) if shape is None or len(shape) < 2 else shape[1:]
    if level <= var.lod_level and dims_compatible(rows, tuple(var.shape[1:])):
        return None
    return (-1, *rows), max(level, var.lod_level)


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
    buffers with the dense rows beside them (concat of a fed user id with dense features);
    kept where only ops that use an optional LoD read it (runtime/lod_optional.py)."""
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
            elif (demanded := _demanded(var, value)) is not None:
                changes[name] = demanded
            continue
        if type(value) is LoDTensor and (level := optional_lod_level(
                program, var, len(value.recursive_sequence_lengths()))):
            changes[name] = ((-1, *var.shape[1:]), level)
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
    steps = steps_bucket(program, feed)
    if not changes and steps is None:
        return program, feed
    key = (program.version, tuple(sorted(changes.items())), steps)
    copies = program.__dict__.setdefault("_feed_shaped", {})
    hit = copies.get(key)
    if hit is None:
        if len(copies) >= _COPIES_PER_PROGRAM:
            copies.clear()
        hit = _retyped(program, changes, steps)
        copies[key] = hit
    return hit, feed


def _retyped(program, changes: dict, steps: int | None = None):
    """A copy of ``program`` whose fed variables have the shapes in ``changes`` (and whose
    default array capacities are ``steps``: step_bucket.py) and whose ops' outputs take the
    types inferred from them, in program order."""
    def refused(why: str) -> FeedError:
        if not changes:
            return FeedError(f"a fed LoD holds sequences longer than the default array "
                             f"capacity, and graphc re-types the program for {steps} steps, "
                             f"but {why}; give lod_tensor_to_array(capacity=)")
        name, (shape, level) = next(iter(changes.items()))
        declared_var = program.global_block().var(name)
        declared = list(declared_var.shape)
        demanded = getattr(declared_var, "lod_demanded_by", None)
        if demanded and level:
            return FeedError(f"feed '{name}' carries a LoD of {level} level(s) with rows "
                             f"{list(shape[1:])}; it is declared without a LoD, typed "
                             f"lod_level={declared_var.lod_level} for {demanded}, and graphc "
                             f"re-types the program for the LoD fed, but {why}")
        if demanded:
            return FeedError(f"feed '{name}' is fed a dense array of shape {list(shape)}, but "
                             f"{demanded} needs sequences from it (declared without a LoD, "
                             f"graphc typed it lod_level={declared_var.lod_level} for that op, "
                             f"as Paddle runs the LoD fed): {why}; give a LoDTensor "
                             f"(fluid.create_lod_tensor(data, recursive_seq_lens, place)) or "
                             f"feed through a DataFeeder")
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
    retyped = {}
    for name, (shape, level) in changes.items():  # (level: 0, a LoD variable fed dense)
        var = block.var(name)
        var.need_check_feed = True  # the copy is made for exactly this shape
        retyped[name] = var.type._replace(shape=tuple(shape), lod_level=level)
    widened = widen(block, steps) if steps else []
    try:
        types = reinfer(copy, retyped, also=widened)
    except ReinferError as exc:  # a shape error, or an op that cannot take the type
        raise refused(f"then {exc}") from None
    apply(copy, types)
    return copy
