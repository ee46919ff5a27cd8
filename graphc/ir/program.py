"""The user-facing Program builder: Programs of Blocks holding Variables and Operators.

Names, slots and habits are Paddle Fluid's, so scripts and weights move across unchanged.
"""

from __future__ import annotations

import contextlib
import copy
import weakref
from collections.abc import Iterable
from typing import Any

from .errors import ArgumentValueError, OpDefinitionError, ProgramError, ShapeError
from .opdef import get_op_def
from .program_compat import OP_NAMESCOPE, OpDescView, ProgramCompat
from .source import user_source
from .types import normalize_dtype, normalize_shape, types_compatible
from .variable import Parameter, Variable, check_name

__all__ = ["ROLES", "Block", "Operator", "Parameter", "Program", "Variable", "check_name"]

ROLES = ("forward", "backward", "optimize", "lr_sched")


class Operator:
    """One op in a Block: type, slots mapping to variable names, attributes, source line."""

    def __init__(self, block: Block, type: str, inputs: dict[str, list[str]],
                 outputs: dict[str, list[str]], attrs: dict[str, Any], source: str | None,
                 role: str = "forward"):
        self.block, self.type, self.source, self.role = block, type, source, role
        self.inputs, self.outputs, self.attrs = inputs, outputs, attrs
        self.namescope = OP_NAMESCOPE.get()  # fluid.name_scope's path ('/' outside any)

    @property
    def desc(self) -> OpDescView:
        """Paddle's ``op.desc``: attributes (with ``op_namescope``) and slots."""
        return OpDescView(self)

    @property
    def where(self) -> str:
        return f"op {self.type}" + (f" at {self.source}" if self.source else "")

    @property
    def input_names(self) -> list[str]:
        return list(self.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self.outputs)

    def input(self, slot: str) -> list[str]:
        return list(self.inputs.get(slot, []))

    def output(self, slot: str) -> list[str]:
        return list(self.outputs.get(slot, []))

    @property
    def input_arg_names(self) -> list[str]:
        return [n for names in self.inputs.values() for n in names]

    @property
    def output_arg_names(self) -> list[str]:
        return [n for names in self.outputs.values() for n in names]

    def attr(self, name: str) -> Any:
        if name not in self.attrs:
            raise OpDefinitionError(f"{self.where}: no attribute '{name}'")
        return self.attrs[name]

    def has_attr(self, name: str) -> bool:
        return name in self.attrs

    @property
    def attr_names(self) -> list[str]:
        return list(self.attrs)

    @property
    def idx(self) -> int:
        """This op's position in its block (Paddle's ``op.idx``)."""
        for i, op in enumerate(self.block.ops):
            if op is self:
                return i
        raise ProgramError(f"{self.where}: the op is no longer in block {self.block.idx}")

    def all_attrs(self) -> dict[str, Any]:
        return dict(self.attrs)

    def set_attr(self, name: str, value: Any) -> None:
        opdef = get_op_def(self.type, self.where)
        self.attrs = opdef.normalize_attrs({**self.attrs, name: value}, self.where)
        self.block.program._bump()

    def __repr__(self) -> str:
        def slots(d):
            return ", ".join(f"{k}={v}" for k, v in d.items())
        return f"{{{slots(self.outputs)}}} = {self.type}({slots(self.inputs)})"


def _names(value, where: str, slot: str) -> list[str]:
    if value is None:
        return []
    items = value if isinstance(value, list | tuple) else [value]
    out = []
    for item in items:
        if isinstance(item, Variable):
            out.append(item.name)
        elif isinstance(item, str):
            out.append(item)
        else:
            raise ProgramError(f"{where}: slot '{slot}' expects Variables or names, "
                               f"got {type(item).__name__}")
    return out


class Block:
    """An ordered list of ops over a dict of variables (graphc builds only block 0 today)."""

    def __init__(self, program: Program, idx: int, parent_idx: int = -1):
        self.program, self.idx, self.parent_idx = program, idx, parent_idx
        self.vars: dict[str, Variable] = {}
        self.ops: list[Operator] = []

    # -- variables -------------------------------------------------------------------
    def var(self, name: str) -> Variable:
        var = self._find_var(name)
        if var is None:
            raise ProgramError(f"variable '{name}' is not in block {self.idx}")
        return var

    def has_var(self, name: str) -> bool:
        return self._find_var(name) is not None

    def _find_var(self, name: str) -> Variable | None:
        block = self
        while block is not None:
            var = block.vars.get(name)
            if var is not None:
                return var
            block = block.parent
        return None

    @property
    def parent(self) -> Block | None:
        return self.program.blocks[self.parent_idx] if self.parent_idx >= 0 else None

    def create_var(self, name: str | None = None, shape=None, dtype="float32",
                   **kwargs) -> Variable:
        """Create (or, for an existing name of the same kind, return) a variable."""
        if name is None:
            from . import unique_name
            name = unique_name.generate("_generated_var")
        if name in self.vars:
            var = self.vars[name]
            if shape is not None and var.shape is not None and \
                    tuple(var.shape) != normalize_shape(shape):
                raise ArgumentValueError(f"variable '{name}' exists with shape "
                                         f"{list(var.shape)}, not {list(shape)}")
            return var
        var = Variable(self, name=name, shape=shape, dtype=dtype, **kwargs)
        self.vars[name] = var
        self.program._bump()
        init = kwargs.get("initializer")
        if init is not None:
            # Paddle's create_var runs it into this block (TDM creates its tree-info table
            # so in the startup program: a fill op there, then a scope variable)
            init(var, self)
        return var

    def create_parameter(self, name: str, shape, dtype="float32", **kwargs) -> Parameter:
        """A new parameter, or the existing one of that name: naming a parameter twice
        (``param_attr="shared_w"`` in two layers) shares it, as in Paddle; its gradient is
        the sum over its uses. The first definition's attributes (initializer, learning
        rate, regularizer, trainable) hold. Another shape or dtype is an error."""
        existing = self.vars.get(name)
        if existing is not None:
            param = self._shared_parameter(existing, name, shape, dtype)
        else:
            param = Parameter(self, name, shape, dtype, **kwargs)
            param.defined_at = user_source()
            self.vars[name] = param
            self.program._bump()
        init = kwargs.get("initializer")
        # Paddle's Block.create_parameter: an initializer given here fills the parameter in
        # this block (a program built op by op initialises itself), once: not when an op of
        # the global block already writes it (LayerHelper passes none; it fills startup)
        if init is not None and not self.program._writes(name):
            init(param, self)
        return param

    def _shared_parameter(self, existing: Variable, name: str, shape, dtype) -> Parameter:
        here = user_source() or "unknown line"
        if not isinstance(existing, Parameter):
            raise ProgramError(f"parameter '{name}' (at {here}) would share its name with a "
                               f"variable of block {self.idx} that is not a parameter")
        shape = None if shape is None else [int(d) for d in shape]
        dtype = normalize_dtype(dtype)
        if shape != list(existing.shape) or dtype != existing.dtype:
            first = getattr(existing, "defined_at", None) or "unknown line"
            raise ProgramError(
                f"parameter '{name}' is defined twice with different shapes or dtypes: "
                f"{list(existing.shape)} {existing.dtype} at {first}, then {shape} {dtype} "
                f"at {here}; layers share a parameter by name only when both agree")
        return existing

    def all_parameters(self) -> list[Parameter]:
        return [v for v in self.vars.values() if isinstance(v, Parameter)]

    # -- ops -------------------------------------------------------------------------
    def append_op(self, type: str | None = None, inputs=None, outputs=None, attrs=None,
                  source: str | None = None) -> Operator:
        if type is None:
            raise ArgumentValueError("Block.append_op: the op's type is required (type=...)")
        op = self._make_op(type, inputs, outputs, attrs, source)
        self.ops.append(op)
        return op

    def _append_trusted(self, type: str, inputs: dict[str, list[str]],
                        outputs: dict[str, list[str]], attrs: dict, source: str | None
                        ) -> Operator:
        """Append an op graphc built itself, valid by construction: variable names, slots
        of its definition, normalised attributes, outputs already typed. It skips the
        checks of append_op (backward appends thousands); the verifier still checks it."""
        op = Operator(self, type, inputs, outputs, attrs, source, self.program._current_role)
        self.ops.append(op)
        self.program._bump()
        return op

    def _insert_op(self, index: int, type: str, inputs=None, outputs=None, attrs=None,
                   source: str | None = None) -> Operator:
        op = self._make_op(type, inputs, outputs, attrs, source)
        self.ops.insert(index, op)
        return op

    def _prepend_op(self, *args, **kwargs) -> Operator:
        return self._insert_op(0, *args, **kwargs)

    def _remove_op(self, index: int) -> None:
        del self.ops[index]
        self.program._bump()

    def _describe_inputs(self, ins: dict[str, list[str]]) -> str:
        """The inputs of an op whose shape inference failed, each with its shape; a fed
        variable declared with only known dims is flagged: a missing batch dim is the
        usual cause (declared [13] where [-1, 13] was meant)."""
        lines = []
        for slot, names in ins.items():
            for n in names:
                var = self._find_var(n)
                line = f"  input '{slot}': variable '{n}' of shape {list(var.shape)} {var.dtype}"
                if var.is_data and var.shape and all(d >= 0 for d in var.shape):
                    line += (" -- a fed variable declared without an unknown (-1) dimension; "
                             "if its first dimension should be the batch size, declare it "
                             f"with shape {[-1, *var.shape]}")
                lines.append(line)
        # an input computed from such a feed fails further down: name the suspects too
        named = {n for names in ins.values() for n in names}
        static_feeds = [f"'{v.name}' {list(v.shape)}" for v in self.program.global_block()
                        .vars.values() if v.is_data and v.name not in named and v.shape
                        and all(d >= 0 for d in v.shape)]
        if static_feeds:
            lines.append("  note: fed variables declared without a -1 dimension: "
                         f"{', '.join(static_feeds)}; if a first dimension is meant as the "
                         "batch size, declare it as -1")
        return "\n".join(lines)

    def _make_op(self, type, inputs, outputs, attrs, source) -> Operator:
        source = source or self.program._source or user_source()
        where = f"op {type}" + (f" at {source}" if source else "")
        opdef = get_op_def(type, where)
        ins = {k: names for k, v in (inputs or {}).items() if (names := _names(v, where, k))}
        outs = {k: names for k, v in (outputs or {}).items() if (names := _names(v, where, k))}
        opdef.check_slots("input", ins, where)
        opdef.check_slots("output", outs, where)
        attrs = opdef.normalize_attrs(dict(attrs or {}), where)
        in_types = {}
        for slot, names in ins.items():
            types = []
            for n in names:
                var = self._find_var(n)
                if var is None:
                    raise ProgramError(f"{where}: input '{slot}' names unknown variable '{n}'")
                if var.shape is None:
                    raise ShapeError(f"{where}: input '{slot}' variable '{n}' has no shape; "
                                     "is it written by an op before this one?")
                types.append(var.type)
            in_types[slot] = types
        try:
            inferred = opdef.infer_types(in_types, attrs, where)
        except ShapeError as exc:
            # a sequence op on rows of a feed declared dense: Paddle runs it on the fed LoD
            from .lod_demand import retype_op_inputs
            retyped = retype_op_inputs(self, opdef, ins, attrs, where)
            if retyped is None:
                raise ShapeError(f"{exc}\n{self._describe_inputs(ins)}") from None
            inferred = opdef.infer_types(retyped, attrs, where)
        untyped = []
        for slot, names in outs.items():
            types = inferred.get(slot)
            if types is None or len(types) != len(names):
                raise ShapeError(f"{where}: output '{slot}' has {len(names)} variables but the "
                                 f"op produces {0 if types is None else len(types)}")
            for n, t in zip(names, types):
                var = self._find_var(n)
                if var is None:
                    raise ProgramError(f"{where}: output '{slot}' names unknown variable '{n}'")
                if var.shape is None:
                    untyped.append((var, t))
                elif not types_compatible(var.type, t):
                    raise ShapeError(f"{where}: output '{slot}' variable '{n}' is "
                                     f"{var.type} but the op produces {t}")
        # Only once every output checked out do new variables take their types.
        for var, t in untyped:
            var._set_type(t.shape, t.dtype, t.lod_level, t.array, t.element_lod)
            var.selected_rows = t.sparse
        op = Operator(self, type, ins, outs, attrs, source, self.program._current_role)
        self.program._bump()
        return op


class Program(ProgramCompat):
    """A static program: blocks of ops; block 0 is the global block."""

    # Paddle's process-wide global_seed(): the random_seed of Programs made afterwards
    _global_seed = 0
    # Paddle's record of PipelineOptimizer's sections (None: not a pipeline program)
    _pipeline_opt = None

    def __init__(self):
        self.blocks: list[Block] = [Block(self, 0)]
        self.random_seed = Program._global_seed
        self._version = 0
        self._current_role = "forward"
        self._source: str | None = None  # set by source_guard: one line for many ops
        self.cloned_from = None  # clone(): a weak reference to the program copied

    def _bump(self) -> None:
        self._version += 1

    @property
    def version(self) -> int:
        """Increments on every change; caches of lowered graphs key on it."""
        return self._version

    def global_block(self) -> Block:
        return self.blocks[0]

    def _writes(self, name: str) -> bool:
        """Whether an op of the global block writes ``name`` (an initialised parameter)."""
        return any(name in op.output_arg_names for op in self.blocks[0].ops)

    def block(self, index: int) -> Block:
        return self.blocks[index]

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    def all_parameters(self) -> list[Parameter]:
        return [p for b in self.blocks for p in b.all_parameters()]

    def list_vars(self) -> Iterable[Variable]:
        for b in self.blocks:
            yield from b.vars.values()

    @property
    def num_ops(self) -> int:
        return sum(len(b.ops) for b in self.blocks)

    @contextlib.contextmanager
    def op_role_guard(self, role: str):
        """Ops appended inside get ``role`` (backward/optimize/lr_sched)."""
        if role not in ROLES:
            raise ProgramError(f"op role must be one of {ROLES}, got {role!r}")
        old, self._current_role = self._current_role, role
        try:
            yield
        finally:
            self._current_role = old

    def _lr_schedule_guard(self, is_with_opt: bool = False):
        """Paddle's private guard that programs use around their learning-rate arithmetic
        (BERT's and the Transformer's warmup): the ops get the ``lr_sched`` role. Paddle's
        ``is_with_opt`` also marks them Optimize; graphc's roles are exclusive and
        ``lr_sched`` is what its passes read as both (pserver, pipeline)."""
        return self.op_role_guard("lr_sched")

    def _optimized_guard(self, param_and_grads):
        """Paddle's private guard around hand-written update ops (BERT's weight decay):
        ``optimize`` role. Paddle also records the (parameter, gradient) names as the ops'
        ``op_role_var``; graphc finds a parameter's gradient from the graph instead."""
        for v in param_and_grads or ():
            if v is not None and not isinstance(v, str | Variable):
                raise ProgramError(f"_optimized_guard takes parameters and gradients "
                                   f"(Variables or names), got {type(v).__name__}")
        return self.op_role_guard("optimize")

    @contextlib.contextmanager
    def source_guard(self, source: str | None):
        """Ops appended inside record ``source`` (e.g. the user's ``minimize`` line) instead of
        walking the stack for each: library code that appends many ops uses it."""
        old, self._source = self._source, source
        try:
            yield
        finally:
            self._source = old

    def clone(self, for_test: bool = False) -> Program:
        """A deep copy. ``for_test`` keeps forward ops only and sets ``is_test`` attrs."""
        from .regions import regions_for_test  # regions imports the graph, built on this
        new = Program()
        new.random_seed = self.random_seed
        new.blocks = []
        for b in self.blocks:
            nb = Block(new, b.idx, b.parent_idx)
            for name, v in b.vars.items():
                nv = copy.copy(v)
                nv.block = nb
                if isinstance(v, Parameter):
                    nv.optimize_attr = dict(v.optimize_attr)
                nb.vars[name] = nv
            for op in b.ops:
                # an op standing for forward ops of the block (PipelineOptimizer's loop over
                # microbatches holds them with the backward): a test program gets them back
                stands_for = getattr(op, "forward_ops", ())
                for old in (stands_for if for_test and op.role != "forward" else (op,)):
                    if for_test and old.role != "forward":
                        continue
                    attrs = dict(old.attrs)
                    if for_test and "is_test" in attrs:
                        attrs["is_test"] = True
                    if for_test:  # the ops inside a branch or a loop body too
                        attrs = regions_for_test(old.type, attrs)
                    nb.ops.append(Operator(nb, old.type,
                                           {k: list(v) for k, v in old.inputs.items()},
                                           {k: list(v) for k, v in old.outputs.items()}, attrs,
                                           old.source, old.role))
                    if stands_for and not for_test:
                        nb.ops[-1].forward_ops = stands_for
            if for_test:
                used = {n for op in nb.ops for n in op.input_arg_names + op.output_arg_names}
                nb.vars = {k: v for k, v in nb.vars.items()
                           if k in used or v.persistable or v.is_data}
            new.blocks.append(nb)
        # the program this one copies (weakly): a non-iterable DataLoader bound to the
        # original also feeds its clones, as Paddle's reader op is copied with the program
        new.cloned_from = weakref.ref(self)
        return new

    def global_seed(self, seed: int = 0) -> None:
        """Paddle's: ``seed`` becomes this program's random_seed and every later Program's."""
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ProgramError(f"Program.global_seed: seed must be an int, got {seed!r}")
        Program._global_seed = self.random_seed = seed

    def to_string(self, throw_on_error: bool, with_details: bool = False) -> str:
        """The program as graphc's text IR (see ir/program_serial.py)."""
        from .program_serial import program_to_string
        return program_to_string(self, throw_on_error, with_details)

    @staticmethod
    def parse_from_string(binary_str) -> Program:
        """The Program ``to_string()`` wrote (ir/program_serial.py)."""
        from .program_serial import program_from_string
        return program_from_string(binary_str)

    def to_text(self, **kwargs) -> str:
        """The SSA text form of this program (see ``graphc.lower``)."""
        from .graph import lower
        return lower(self).to_text(**kwargs)

    def __str__(self) -> str:
        try:
            return self.to_text()
        except ProgramError:
            # a program graphc cannot lower (an op reading a plain variable no op writes,
            # as Paddle's unit tests build by hand) still prints: its ops, one a line
            return "\n".join(f"block {b.idx}:\n" + "\n".join(f"  {op!r}" for op in b.ops)
                             for b in self.blocks)

    def __repr__(self) -> str:
        return f"<Program {self.num_ops} ops, {len(self.all_parameters())} parameters>"
