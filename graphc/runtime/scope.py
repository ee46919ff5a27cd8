"""Scopes hold the values of persistable variables (parameters, optimizer state) by name.

Arrays stay on their device between runs; both Paddle's and a dict-like spelling work.
A jax array a user sets is copied on entry: steps donate the scope's buffers, never the user's.
Parameters a rolled program keeps stacked are still answered by name (stacked_state.py).
"""

from __future__ import annotations

from weakref import WeakKeyDictionary

import jax
import numpy as np

from ..backends.lod import LoDArray
from ..backends.precision import with_graphc_x64
from ..ir.errors import GraphcError
from .lod import unpack
from .lod_tensor import LoDTensor
from .stacked_state import StateDict, prepare_for_step
from .tensor_methods import TensorMethods


class ScopeError(GraphcError):
    """A variable is missing from a scope, or is given a value that is not a numeric array."""


class Tensor(TensorMethods):
    """A variable's value in a scope: ``np.array(t)``, ``t.set(array)``, ``t.shape()``, and
    the rest of Paddle's Tensor methods (tensor_methods.py). A dense value's LoD is empty; a
    LoD value (a persistable LoD variable's) reads as its tokens and sequence lengths."""

    __slots__ = ("_scope", "_name")

    def __init__(self, scope: Scope, name: str):
        self._scope, self._name = scope, name

    def _array(self):
        if self._name not in self._scope:
            raise ScopeError(f"variable '{self._name}' has no value yet")
        value = self._scope.whole(self._name)
        return self._unpacked(value) if isinstance(value, LoDArray) else value

    @staticmethod
    def _unpacked(value):
        # ifelse26: a LoD value (Paddle's tests read a persistable split_lod_tensor side's
        # tokens and lengths back from the scope): the LoDTensor its buffers pack
        return unpack(value)

    def __array__(self, dtype=None, copy=None):
        arr = np.asarray(self._array())
        return arr.astype(dtype) if dtype is not None else arr

    def numpy(self) -> np.ndarray:
        return np.asarray(self._array())

    def set(self, array, place=None) -> None:
        self._scope[self._name] = array

    def shape(self) -> list[int]:
        value = self._array()
        return value.shape() if isinstance(value, LoDTensor) else list(value.shape)

    def _dtype(self):
        value = self._array()
        return value._value().dtype if isinstance(value, LoDTensor) else value.dtype

    def _read(self):
        return np.asarray(self._array())

    def _holds(self) -> bool:
        return self._name in self._scope

    def _write(self, array) -> None:
        if array is not None:
            self._scope[self._name] = array
        elif self._name in self._scope:
            del self._scope[self._name]

    def _device_of(self):
        devices = getattr(self._array(), "devices", None)
        return next(iter(devices())) if devices is not None else None

    def lod(self) -> list:
        value = self._scope.whole(self._name) if self._name in self._scope else None
        return self._unpacked(value).lod() if isinstance(value, LoDArray) else []

    def recursive_sequence_lengths(self) -> list:
        value = self._scope.whole(self._name) if self._name in self._scope else None
        return (self._unpacked(value).recursive_sequence_lengths()
                if isinstance(value, LoDArray) else [])

    def has_valid_recursive_sequence_lengths(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"Tensor({self._name}, {np.asarray(self._array())!r})"


class RankTable:
    """A fetched rank table as Paddle's ``LoDRankTable`` reads: ``items()``."""

    __slots__ = ("_items",)

    def __init__(self, items: list):
        self._items = items

    def items(self) -> list:
        return list(self._items)


class ScopeVar:
    __slots__ = ("_tensor",)

    def __init__(self, tensor: Tensor):
        self._tensor = tensor

    def get_tensor(self) -> Tensor:
        return self._tensor

    def set_int(self, value: int) -> None:
        """Paddle's int-holding variable (a counter kept in the scope, not a tensor)."""
        self._tensor._scope._ints()[self._tensor._name] = int(value)

    def is_int(self) -> bool:
        return self._tensor._name in self._tensor._scope._ints()

    def get_int(self) -> int:
        ints = self._tensor._scope._ints()
        if self._tensor._name not in ints:
            raise ScopeError(f"variable '{self._tensor._name}' holds no int (set_int)")
        return ints[self._tensor._name]

    def get_fetch_list(self) -> list:
        """Paddle's FEED_MINIBATCH / FETCH_LIST variable: a list of tensors the scope keeps
        under this name, apart from its arrays (core.set_feed_variable fills it too)."""
        return self._tensor._scope.tensor_list(self._tensor._name)

    def get_lod_rank_table(self):
        """The rank table held here (lod_rank_table's int [N, 2] rows) as Paddle's
        LoDRankTable: ``items()`` lists (index, length), longest first; the unused rows of a
        deeper level's table (length -1) are left out."""
        rows = np.asarray(self._tensor._array())
        if rows.ndim != 2 or rows.shape[1] != 2 or rows.dtype.kind not in "iu":
            raise ScopeError(f"variable '{self._tensor._name}' holds no rank table (int "
                             f"[N, 2] rows made by lod_rank_table), got {rows.dtype} "
                             f"{list(rows.shape)}")
        return RankTable([(int(i), int(n)) for i, n in rows if n >= 0])

    def get_lod_tensor_array(self):
        """A persistable tensor array's written elements as Paddle's LoDTensorArray (arr2lod:
        Paddle's tests read lod_tensor_to_array's array back from the scope)."""
        from ..backends.arrays import TensorArray
        from .fetches import fetched
        t = self._tensor
        value = t._scope.whole(t._name) if t._name in t._scope else None
        if not isinstance(value, TensorArray):
            raise ScopeError(f"variable '{t._name}' holds no tensor array")
        return fetched(value, 1, False)


class Scope:
    """Named arrays. ``scope.find_var(n).get_tensor()`` (Paddle) or ``scope[n]`` (dict)."""

    def __init__(self):
        # name -> array; parameters a rolled program keeps stacked live as rows of one
        # ``@STACK`` array, which StateDict keeps in one place (stacked_state.py)
        self._vars: StateDict = StateDict()
        # runs per program (keys dropout's randomness); weak, so programs can be freed
        self._run_counters: WeakKeyDictionary = WeakKeyDictionary()
        # name -> (nranks, whole shape) for arrays held as the [nranks, c] rows of a
        # data-parallel Reduce-mode shard (see backends.jax.data_parallel); readers get wholes
        self._shards: dict[str, tuple[int, tuple[int, ...]]] = {}
        self._stacked = self._vars.held

    @with_graphc_x64  # arrays graphc makes keep 64-bit types (backends/precision)
    def whole(self, name: str):
        """The variable's value as the program declares it (a sharded one reassembled, a
        stacked one's row)."""
        arr = self._vars.get(name)
        if arr is None:
            return self._stacked.row(self._vars, name)  # KeyError when it is nowhere
        shard = self._shards.get(name)
        if shard is None:
            return arr
        from ..backends.jax import from_rows
        return jax.numpy.asarray(from_rows(arr, shard[1]))

    # -- the runtime's view (executor, startup): arrays as held, no copies ----------------
    def gather(self, names, layouts=None) -> list:
        """The arrays held under ``names`` as they are held; KeyError for a name the scope
        holds nowhere or only as a stack's row. ``layouts``: the ``(name, shard)`` a step
        wants per name: an array held in another layout comes whole (``in_layouts``)."""
        vars_ = self._vars
        arrays = [vars_[n] for n in names]
        if self._shards and layouts is not None:
            return self.in_layouts(layouts, arrays)
        return arrays

    def commit(self, names, arrays) -> None:
        """Hold ``arrays`` under ``names`` as they are: arrays the runtime made, which the
        scope owns (no copy, unlike ``scope[name] = array``); a stack member's lands in its
        row. Layouts (``set_shards``) are the caller's to update."""
        self._vars.update(zip(names, arrays))

    def commit_new(self, names, arrays) -> None:
        """``commit`` for state a run just made (the startup program's, a created value):
        each array is pinned to the device it is on. jit compiles per argument placement;
        a step's outputs are pinned whenever one of its inputs is (a DataLoader's placed
        feeds), so unpinned new state would make the second step compile again."""
        self.commit(names, pinned(arrays))

    def holds(self, name: str) -> bool:
        """Whether ``name`` has an array of its own (not only a row of a stack)."""
        return name in self._vars

    def held(self, name: str):
        """The array held under ``name``, as held (KeyError when it has none of its own)."""
        return self._vars[name]

    def steady_state(self):
        """(the name -> array dict, the run counters' dict keyed by weak references to
        programs: the WeakKeyDictionary's own ``data``) for the runtime's steady runs
        (run_plan.RunPlan.steady), or None while a variable is held as a stack's row or a
        data-parallel step's rows: those runs take the general path."""
        if self._shards or self._stacked.rows:
            return None
        return self._vars, self._run_counters.data

    def has_shards(self) -> bool:
        """Whether some variable is held as a Reduce-mode data-parallel step's rows."""
        return bool(self._shards)

    def set_shards(self, layouts) -> None:
        """Record how each ``(name, shard)`` of ``layouts`` is now held: ``shard`` is
        ``(nranks, whole shape)`` for a Reduce-mode step's rows, None for a whole tensor."""
        shards = self._shards
        for name, shard in layouts:
            if shard is not None:
                shards[name] = shard
            else:
                shards.pop(name, None)

    def in_layouts(self, layouts, arrays: list) -> list:
        """``arrays`` (as held under the names of ``layouts``), each whole where its
        ``(name, shard)`` wants another layout than the scope holds it in: a step on one
        device, all-reduce, or another device count places the whole tensor as it needs."""
        shards = self._shards
        return [self.whole(name) if name in shards and shards[name] != want else arr
                for (name, want), arr in zip(layouts, arrays)]

    def prepare_stacked(self, step) -> None:
        """Hold what ``step`` reads in the form it reads it: stack members it reads alone
        split out, stacks it reads built from their members (stacked_state.py)."""
        prepare_for_step(step, self._vars, self._shards, self)

    def run_count(self, program) -> int:
        """How many steps of ``program`` ran against this scope (keys its randomness)."""
        return self._run_counters.get(program, 0)

    def set_run_count(self, program, count: int) -> None:
        self._run_counters[program] = count

    def tensor_list(self, name: str) -> list:
        """The list of tensors held under ``name`` (Paddle's feed/fetch list variables)."""
        return self.__dict__.setdefault("_tensor_lists", {}).setdefault(name, [])

    def find_var(self, name: str) -> ScopeVar | None:
        """The variable of this scope, else of its parents (``new_scope``); None if none."""
        if name in self or name in self._declared():
            return ScopeVar(Tensor(self, name))
        parent = self.__dict__.get("_parent")
        return parent.find_var(name) if parent is not None else None

    def var(self, name: str) -> ScopeVar:
        """Find or create (Paddle's ``scope.var(name)``); set its value with get_tensor().set.
        Created, it is found (``find_var``) and counted (``size``) before it holds a value."""
        self._declared().add(name)
        return ScopeVar(Tensor(self, name))

    # -- unitrd3: Paddle's scope tree and small-value variables (test_scope) ----------------
    def _declared(self) -> set:
        return self.__dict__.setdefault("_declared_names", set())

    def new_scope(self) -> Scope:
        """A child scope: its ``find_var`` falls back to this one (Paddle's kid scopes)."""
        kid = Scope()
        kid._parent = self
        self.__dict__.setdefault("_kids", []).append(kid)
        return kid

    def drop_kids(self) -> None:
        self.__dict__.pop("_kids", None)

    def size(self) -> int:
        """The number of variables of this scope (created or holding a value)."""
        return len(set(self.keys()) | self._declared())

    def _remove_from_pool(self) -> None:
        """Paddle deletes a scope from its pool once; a second delete is an error."""
        if self.__dict__.get("_removed"):
            raise ScopeError("Deleting a nonexistent scope is not allowed: this scope was "
                             "already removed from the pool")
        self._removed = True

    def _ints(self) -> dict:
        return self.__dict__.setdefault("_int_values", {})

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return np.asarray(self.whole(name))
        except KeyError:
            raise ScopeError(f"scope has no variable '{name}'") from None

    @with_graphc_x64
    def __setitem__(self, name: str, array) -> None:
        # A step donates (consumes) the buffers of the state it updates. The scope must own
        # them: the caller may read its array again, or set it under a second name too (one
        # buffer under two names cannot be donated twice), so a jax array is copied. numpy
        # values and lists become new device buffers anyway; the executor's own outputs go
        # in through ``commit`` and are donated as they are.
        if isinstance(array, jax.Array):
            array = array.copy()
        try:
            value = jax.numpy.asarray(array)
        except (TypeError, ValueError) as e:  # strings, objects, ragged lists
            raise ScopeError(f"variable '{name}': cannot hold a {type(array).__name__} "
                             f"({array!r:.60}); give a numeric array ({e})") from None
        if name in self._stacked.stacks:  # a stack replaced whole: its members split out
            self._stacked.split(self._vars, name)
        self._vars[name] = pinned((value,))[0]
        self._shards.pop(name, None)

    def __contains__(self, name: str) -> bool:
        return name in self._vars or name in self._stacked.rows

    def __delitem__(self, name: str) -> None:
        stacked = self._stacked
        if name in stacked.rows:
            stacked.split(self._vars, stacked.rows[name][0])
        elif name in stacked.stacks:  # the stack goes; its members stay, each on its own
            stacked.split(self._vars, name)
            return
        try:
            del self._vars[name]
        except KeyError:
            raise ScopeError(f"scope has no variable '{name}'") from None
        self._shards.pop(name, None)

    def keys(self):
        """Variable names; stacked parameters are listed by their members' names."""
        return self._stacked.names(self._vars) if self._stacked else self._vars.keys()

    def local_var_names(self) -> list[str]:
        return list(self.keys())

    def __len__(self) -> int:
        return len(self.keys()) if self._stacked else len(self._vars)

    def __repr__(self) -> str:
        return f"<Scope {len(self._vars)} variables>"


# process: Paddle's global_scope(), the one default scope (scope_guard swaps it in a block)
_global_scope = Scope()


def pinned(arrays) -> list:
    """``arrays``, each one held on a single device pinned ("committed") to it; no copy.
    (Reading ``committed`` costs about half a microsecond, so steps' own outputs, pinned
    when their inputs are, are not checked.)"""
    return [a if not isinstance(a, jax.Array) or a.committed
            else jax.device_put(a, next(iter(a.devices()))) for a in arrays]


def global_scope() -> Scope:
    return _global_scope


def _switch_scope(scope: Scope) -> Scope:
    global _global_scope
    old, _global_scope = _global_scope, scope
    return old


class scope_guard:
    """``with scope_guard(scope):`` makes ``scope`` the global scope inside the block."""

    def __init__(self, scope: Scope):
        self.scope = scope

    def __enter__(self):
        self.old = _switch_scope(self.scope)
        return self.scope

    def __exit__(self, *exc):
        _switch_scope(self.old)
