"""Stacked state in a Scope: k parameters a rolled program keeps as one ``[k, ...]`` array
(roll-repeated-layers' ``<first>@STACK<k>`` variables), answered by the members' Paddle names.

A scope holds each value in one place: either a member's own array, or row r of the stack
that holds it (``StackedState.rows[member] = (stack name, r)``), never both. A step that
reads a stacked variable the scope lacks stacks its members once (``prepare_for_step``); a
step that reads a member held in a stack (a program compiled without the pass) gets the
stack split back into its members first. Readers by name get a row; a write by name updates
the row in place (the scope owns the stack's buffer: steps donate it anyway). The scope's
dict (``StateDict``) enforces the one-place rule for every writer, the startup runner's too.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..ir.errors import GraphcError


@functools.partial(jax.jit, donate_argnums=(0,))
def _set_row(stack, row, value):
    return stack.at[row].set(value)


def _placer(like):
    """How to put host arrays where ``like`` lives. On the default device they stay
    uncommitted, as the arrays a step returns are: a committed input would make jit compile
    the step a second time on the next run."""
    if isinstance(like, jax.Array) and getattr(like, "committed", False):
        sharding = like.sharding
        return lambda a: jax.device_put(a, sharding)
    return jnp.asarray


class StateDict(dict):
    """A scope's name -> array dict: a write under a member's name lands in its stack's row
    (or splits the stack when it does not fit), so no value ever lives in two places.
    Reads are plain dict reads; with no stacks held, writes cost one attribute test."""

    __slots__ = ("held",)

    def __init__(self):
        super().__init__()
        self.held = StackedState()

    def __setitem__(self, name, array) -> None:
        held = self.held
        if held.rows and name in held.rows:
            if held.set_row(self, name, array):
                return
            held.split(self, held.rows[name][0])
        dict.__setitem__(self, name, array)

    def update(self, pairs=(), **kw) -> None:
        if not self.held.rows:
            dict.update(self, pairs, **kw)
            return
        for name, array in (pairs.items() if isinstance(pairs, dict) else pairs):
            self[name] = array
        for name, array in kw.items():
            self[name] = array


class StackedState:
    """Which scope variables are stacks, and where each member's row lives."""

    __slots__ = ("stacks", "rows")

    def __init__(self):
        self.stacks: dict[str, tuple[str, ...]] = {}  # stack name -> members, in row order
        self.rows: dict[str, tuple[str, int]] = {}  # member -> (stack name, row)

    def __bool__(self) -> bool:
        return bool(self.stacks)

    def row(self, vars_: dict, member: str):
        name, r = self.rows[member]
        # the index is an operand: one compiled slice per stack type, not one per row
        return lax.dynamic_index_in_dim(vars_[name], r, keepdims=False)

    def set_row(self, vars_: dict, member: str, array) -> bool:
        """Write ``array`` into the member's row; False when it does not fit (another
        shape or dtype: the caller splits the stack and stores the member on its own)."""
        name, r = self.rows[member]
        stack = vars_[name]
        array = jnp.asarray(array)
        if array.shape != stack.shape[1:] or array.dtype != stack.dtype:
            return False
        dict.__setitem__(vars_, name, _set_row(stack, r, array))
        return True

    def split(self, vars_: dict, name: str) -> None:
        """Give the members of stack ``name`` their own arrays again and drop the stack."""
        members = self.stacks.pop(name)
        stack = vars_.pop(name)
        place = _placer(stack)
        # one transfer and k plain copies (eager slicing would dispatch k XLA calls)
        rows = np.asarray(stack)
        for r, m in enumerate(members):
            del self.rows[m]
            dict.__setitem__(vars_, m, place(rows[r]))

    def build(self, vars_: dict, shards: dict, scope, name: str, members: tuple[str, ...],
              type_) -> None:
        """Stack the members (from wherever ``scope`` holds them: ``vars_``, its arrays;
        ``shards``, its row layouts) into ``name``."""
        for holder in {self.rows[m][0] for m in members if m in self.rows}:
            self.split(vars_, holder)
        arrays = [scope.whole(m) for m in members]
        want, dtype = tuple(type_.shape[1:]), jnp.dtype(type_.dtype)
        for m, a in zip(members, arrays):
            if a.shape != want or a.dtype != dtype:
                raise GraphcError(f"scope variable '{m}' holds {a.dtype}{list(a.shape)} but "
                                  f"the program declares {type_.dtype}{list(want)} (it is "
                                  f"row {members.index(m)} of stacked state '{name}')")
        # stacked on the host: jnp.stack of k arrays would compile a k-operand concatenate
        place = _placer(arrays[0])
        dict.__setitem__(vars_, name, place(np.stack([np.asarray(a) for a in arrays])))
        for r, m in enumerate(members):
            del vars_[m]
            shards.pop(m, None)
            self.rows[m] = (name, r)
        self.stacks[name] = tuple(members)

    def names(self, vars_: dict) -> list[str]:
        """The scope's variable names, each stack listed as its members."""
        out = []
        for n in vars_:
            out.extend(self.stacks.get(n, (n,)))
        return out


def prepare_for_step(step, vars_: StateDict, shards: dict, scope) -> None:
    """Make ``scope`` (its arrays ``vars_``, its row layouts ``shards``: Scope.prepare_stacked
    passes them) hold what ``step`` reads in the form it reads it: members a step reads on
    their own are split out of their stack; a stacked variable the scope lacks is stacked
    from its members (once; later steps find it in place)."""
    held = vars_.held
    values = step.updated_inputs + step.readonly_inputs
    for v in values:  # first split, so a stack to build may take members of another
        if v.var.name not in vars_ and v.var.name in held.rows:
            held.split(vars_, held.rows[v.var.name][0])
    for v in values:
        members = v.var.extra.get("stack_of")
        if members and v.var.name not in vars_:
            missing = [m for m in members if m not in scope]
            if missing:
                more = f", and {len(missing) - 1} more" if len(missing) > 1 else ""
                raise GraphcError(
                    f"variable '{missing[0]}' (row {members.index(missing[0])} of stacked "
                    f"state '{v.var.name}'{more}) is not initialised in the scope; run the "
                    "startup program first (exe.run(startup_program))")
            held.build(vars_, shards, scope, v.var.name, tuple(members), v.type)
