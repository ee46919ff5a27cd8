"""Variables and Parameters: the named, typed tensor slots of a Program's Blocks, with Paddle
1.8's constructor and settable attributes (ir/program.py builds Blocks of them)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from .errors import ArgumentTypeError, ArgumentValueError, ProgramError
from .types import TensorType, normalize_dtype, normalize_shape

if TYPE_CHECKING:
    from .program import Block

# '#' separates SSA versions and '%' marks values in the text form, so names avoid them.
_NAME_RE = re.compile(r'^[^\s,:()\[\]{}=#%"]+$')


def check_name(name: str) -> str:
    if not isinstance(name, str):  # a TypeError, as Paddle's data layers check it
        raise ArgumentTypeError(f"invalid variable name {name!r}: a name is a str, got "
                                f"{type(name).__name__}")
    if not _NAME_RE.match(name):
        raise ProgramError(
            f"invalid variable name {name!r}: names are non-empty and contain no whitespace "
            "or any of , : ( ) [ ] { } = # % \"")
    return name


class Variable:
    """A named tensor slot in a Block (shape with -1 for unknown dims, dtype).

    The constructor takes Paddle 1.8's arguments, in its order (``type``: ``LOD_TENSOR`` or
    ``SELECTED_ROWS``; ``capacity``, ``error_clip``, ``belong_to_optimizer`` are kept as
    given) and, as Paddle's, enters the variable in ``block.vars``; ``dtype`` None is
    float32 (graphc types every value). ``selected_rows`` (graphc's spelling of
    ``type=SELECTED_ROWS``) is False for a dense tensor; True for a row-sparse gradient (from
    an ``is_sparse`` embedding) holding some rows of ``shape``. As in Paddle, ``name``,
    ``persistable`` and ``stop_gradient`` can be set; ``shape``, ``dtype`` and ``lod_level``
    cannot (AttributeError): shape inference gives them.
    """

    def __init__(self, block: Block, type="lod_tensor", name=None, shape=None, dtype=None,
                 lod_level=None, capacity=None, persistable=None, error_clip=None,
                 stop_gradient: bool = False, is_data: bool = False,
                 need_check_feed: bool = False, belong_to_optimizer: bool = False, *,
                 selected_rows: bool = False, **kwargs):
        if type not in ("lod_tensor", "selected_rows"):
            raise ProgramError(f"Variable {name!r}: type {type!r}; graphc holds dense tensors "
                               "(LOD_TENSOR) and row-sparse ones (SELECTED_ROWS)")
        if name is None:
            from . import unique_name
            name = unique_name.generate("_generated_var")
        self.block = block
        self._name = check_name(name)
        self._shape = None if shape is None else normalize_shape(shape)
        self._dtype = normalize_dtype("float32" if dtype is None else dtype)
        self.persistable = bool(persistable)
        self.stop_gradient = stop_gradient
        self.is_data = is_data
        self.need_check_feed = need_check_feed
        self._lod_level = int(lod_level or 0)
        self.capacity, self.error_clip = capacity, error_clip
        self.belong_to_optimizer = belong_to_optimizer
        # set by shape inference of an op writing SelectedRows (lookup_table_grad, ...)
        self.selected_rows = bool(selected_rows) or type == "selected_rows"
        # a tensor array (Paddle's LOD_TENSOR_ARRAY): typed by its first write
        self.is_array = False
        self.element_lod = 0  # an array of LoD values: their LoD level
        if block is not None:
            block.vars[self._name] = self

    # Paddle 1.8: shape, dtype and lod_level have no setter (AttributeError); graphc's
    # shape inference types a variable through _set_type
    shape = property(lambda self: self._shape, doc="dims, -1 for unknown ones; None untyped")
    dtype = property(lambda self: self._dtype, doc="graphc's dtype name ('float32', ...)")
    lod_level = property(lambda self: self._lod_level, doc="0 dense, 1 or 2 LoD")

    def _set_type(self, shape=None, dtype=None, lod_level=None, array=None,
                  element_lod=None) -> None:
        if array is not None:
            self.is_array = bool(array)
        if element_lod is not None:
            self.element_lod = int(element_lod)
        if shape is not None:
            self._shape = normalize_shape(shape)
        if dtype is not None:
            self._dtype = normalize_dtype(dtype)
        if lod_level is not None:
            self._lod_level = int(lod_level)

    @property
    def op(self):
        """The op of its block that writes this variable last (None: no op does)."""
        ops = self.block.ops if self.block is not None else ()
        return next((op for op in reversed(ops) if self._name in op.output_arg_names), None)

    @property
    def name(self) -> str:
        return self._name

    @name.setter
    def name(self, new_name: str) -> None:
        """Paddle 1.8 renames a variable in place: graphc re-keys its block too, and refuses
        once an op reads or writes it (the ops would name a variable that is gone)."""
        old, block = self._name, self.block
        check_name(new_name)
        if new_name == old:
            return
        if block is not None and block.vars.get(old) is self:
            used = [op.type for op in block.ops
                    if old in op.input_arg_names or old in op.output_arg_names]
            if used:
                raise ProgramError(f"cannot rename variable '{old}' to '{new_name}': op "
                                   f"{used[0]} already uses it; name it when it is created")
            if new_name in block.vars:
                raise ProgramError(f"cannot rename variable '{old}' to '{new_name}': the "
                                   "block has a variable of that name")
            del block.vars[old]
            block.vars[new_name] = self
            block.program._bump()
        self._name = new_name

    @property
    def type(self) -> TensorType:
        if self.shape is None:
            raise ProgramError(f"variable '{self.name}' has no shape yet")
        return TensorType(self.shape, self.dtype, self.selected_rows, self.lod_level,
                          self.is_array, self.element_lod)

    @property
    def is_parameter(self) -> bool:
        return False

    @property
    def grad_name(self) -> str:
        return self.name + "@GRAD"

    @property
    def ndim(self) -> int:
        return len(self.shape or ())

    def __repr__(self) -> str:
        shape = "?" if self.shape is None else list(self.shape)
        flags = "".join(f", {f}" for f in ("persistable", "stop_gradient", "is_data")
                        if getattr(self, f))
        if self.selected_rows:
            flags = ", selected_rows" + flags
        return f"Variable({self.name}, shape={shape}, dtype={self.dtype}{flags})"


def _check_parameter_shape(name, shape, dtype) -> None:
    """Paddle 1.8's Parameter checks, as ValueErrors: a shape and a dtype are required, and
    the shape has at least one dimension, none negative (a parameter's size is fixed)."""
    if shape is None:
        raise ArgumentValueError(f"parameter '{name}': shape is None; a parameter needs one")
    if dtype is None:
        raise ArgumentValueError(f"parameter '{name}': dtype is None; a parameter needs one")
    if len(shape) == 0:
        raise ArgumentValueError(f"parameter '{name}': shape []; a parameter has at least "
                                 "one dimension")
    if any(int(d) < 0 for d in shape):
        raise ArgumentValueError(f"parameter '{name}': shape {list(shape)} has a negative "
                                 "dimension; a parameter's shape is fully known")


class Parameter(Variable):
    """A trainable, persistable Variable with its optimisation attributes."""

    def __init__(self, block: Block, name: str, shape, dtype="float32", trainable: bool = True,
                 learning_rate: float = 1.0, regularizer=None, initializer=None,
                 need_clip: bool = True, optimize_attr: dict | None = None,
                 lod_level=None, error_clip=None, do_model_average=None,
                 gradient_clip_attr=None, type="lod_tensor", is_distributed=False):
        # Block.create_parameter takes a Parameter's keywords as Paddle spells them too:
        # optimize_attr={'learning_rate': ...}, lod_level (0 for a parameter),
        # do_model_average, gradient_clip_attr (Paddle's own tests build programs so)
        if lod_level:
            raise ProgramError(f"parameter '{name}': lod_level={lod_level}; a parameter is a "
                               "dense tensor (lod_level 0)")
        _check_parameter_shape(name, shape, dtype)
        if optimize_attr is not None:
            unknown = set(optimize_attr) - {"learning_rate"}
            if unknown:
                raise ProgramError(f"parameter '{name}': optimize_attr keys {sorted(unknown)}; "
                                   "Paddle's optimize_attr holds 'learning_rate' only")
            learning_rate = optimize_attr.get("learning_rate", learning_rate)
        super().__init__(block, type=type, name=name, shape=shape, dtype=dtype,
                         persistable=True, error_clip=error_clip, stop_gradient=not trainable)
        if self.shape is None or any(d < 0 for d in self.shape):
            raise ProgramError(f"parameter '{name}' needs a fully known shape, got {shape}")
        self.trainable = trainable
        self.optimize_attr = {"learning_rate": float(learning_rate)}
        self.regularizer = regularizer
        self.initializer = initializer
        self.need_clip = need_clip
        self.do_model_average = do_model_average
        self.gradient_clip_attr = gradient_clip_attr
        self.is_distributed = bool(is_distributed)

    @property
    def is_parameter(self) -> bool:
        return True

    def __repr__(self) -> str:
        return (f"Parameter({self.name}, shape={list(self.shape)}, dtype={self.dtype}, "
                f"trainable={self.trainable})")
