"""Fed persistable state: Paddle's feed op writes any variable, so a fed persistable that is
not data (a learning rate made by create_global_var, a parameter a test sets) takes the value
in the scope before the step and keeps it (the optimizer updates it from there); a failed run
puts the old values back."""

from __future__ import annotations

import numpy as np

from .feeds import FeedError

__all__ = ["feed_plain_variables", "restore_state", "write_fed_state"]


def write_fed_state(program, feed: dict, scope) -> tuple[dict, dict]:
    """Write the fed persistable state of ``feed`` into ``scope``; returns (the rest of the
    feed, the values the scope held before, None for a name it lacked). FeedError, with the
    scope untouched, for a value whose dtype or shape the program does not declare."""
    block = program.global_block()
    state = {}
    for name, value in feed.items():
        var = block._find_var(name)
        if var is None or var.is_data or not var.persistable:
            continue
        arr = np.asarray(value)
        if arr.dtype != np.dtype(var.dtype):
            try:
                arr = arr.astype(var.dtype, casting="same_kind")
            except TypeError:
                raise FeedError(f"feed '{name}' (a persistable variable) has dtype {arr.dtype} "
                                f"but the program declares {var.dtype}") from None
        if var.shape is not None and tuple(arr.shape) != tuple(var.shape):
            raise FeedError(f"feed '{name}' (a persistable variable) has shape "
                            f"{list(arr.shape)} but the program declares {list(var.shape)}")
        state[name] = arr
    old = {name: np.array(scope[name]) if name in scope else None for name in state}
    for name, arr in state.items():
        scope[name] = arr
    return {k: v for k, v in feed.items() if k not in state}, old


def restore_state(scope, old: dict) -> None:
    """Put back what ``write_fed_state`` replaced (after a failed run)."""
    for name, value in old.items():
        if value is None:
            del scope[name]
        else:
            scope[name] = value


def feed_plain_variables(program, feed) -> bool:
    """Paddle feeds any variable (its executor prepends a feed op): a plain variable of the
    global block (not data, not persistable) that no op writes becomes a feed when a run
    feeds it, as its unit tests build programs with ``block.create_var`` inputs. Returns
    whether one changed (the caller lowers again)."""
    if type(feed) is not dict or not feed:
        return False
    block = program.global_block()
    written = {n for op in block.ops for n in op.output_arg_names}
    changed = False
    for name in feed:
        var = block.vars.get(name) if isinstance(name, str) else None
        if var is None or var.is_data or var.persistable or var.shape is None \
                or name in written or getattr(var, "is_array", False):
            continue
        var.is_data = True
        changed = True
    if changed:
        program._bump()
    return changed
