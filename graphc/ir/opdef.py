"""The op registry: for each op type its slots, attribute schema, shape inference and traits.

Both the Program builder and the SSA verifier check ops against these definitions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import OpDefinitionError, ShapeError, UnknownOpError
from .types import AWARE_LOD_LEVEL, MAX_LOD_LEVEL, TensorType, normalize_dtype

REQUIRED = object()  # default marker: the attribute must be given
# An input slot every op has: values it waits for but does not read (control dependencies).
# Lowering rules never see it; the topological order and the interpreter's scheduler do.
CONTROL_SLOT = "_deps"

# Trait names (strings keep the text form and user code simple).
ELEMENTWISE = "elementwise"  # output element i depends only on input element i (after broadcast)
ACTIVATION = "activation"  # unary elementwise non-linearity
OPTIMIZER = "optimizer"  # updates a parameter from its gradient
COLLECTIVE = "collective"  # communicates across replicas
RANDOM = "random"  # consumes randomness (seeded)
STATEFUL = "stateful"  # writes persistable state (running statistics, parameters)
INITIALIZER = "initializer"  # fills a tensor without reading one (startup programs)
NO_GRAD = "no_grad"  # has no gradient (integer outputs, metrics)
LOSS = "loss"  # produces a training loss
WHOLE_TENSOR = "whole_tensor"  # an output element reads a whole input (a norm): not shardable
HOST_CALLBACK = "host_callback"  # calls Python on the host (Print, py_func): runs though unread
TRAITS = frozenset({ELEMENTWISE, ACTIVATION, OPTIMIZER, COLLECTIVE, RANDOM, STATEFUL,
                    INITIALIZER, NO_GRAD, LOSS, WHOLE_TENSOR, HOST_CALLBACK})


@dataclass(frozen=True)
class SlotDef:
    """An input or output slot: ``X``, ``Bias?`` (optional), ``X*`` (duplicable)."""

    name: str
    optional: bool = False
    duplicable: bool = False

    @classmethod
    def parse(cls, spec: str) -> SlotDef:
        name = spec.rstrip("?*")
        return cls(name, optional="?" in spec, duplicable="*" in spec)


_ATTR_TYPES = ("int", "float", "bool", "str", "dtype", "ints", "floats", "strs")


@dataclass(frozen=True)
class AttrDef:
    name: str
    type: str
    default: Any = REQUIRED

    def coerce(self, value: Any, where: str) -> Any:
        """Return ``value`` in the attribute's canonical Python type or raise."""
        t = self.type
        if t == "bool":
            if isinstance(value, bool):
                return value
            raise self._bad(value, where)
        if t == "int":
            if isinstance(value, int) and not isinstance(value, bool):
                return int(value)
            if hasattr(value, "item") and getattr(value, "dtype", None) is not None \
                    and value.dtype.kind in "iu":
                return int(value.item())
            raise self._bad(value, where)
        if t == "float":
            if isinstance(value, bool) or not isinstance(value, int | float) and not (
                    hasattr(value, "dtype") and value.dtype.kind in "iuf"):
                raise self._bad(value, where)
            return float(value)
        if t == "str":
            if isinstance(value, str):
                return value
            raise self._bad(value, where)
        if t == "dtype":
            try:
                return normalize_dtype(value)
            except ShapeError:
                raise self._bad(value, where) from None
        if t in ("ints", "floats", "strs"):
            if not isinstance(value, list | tuple):
                raise self._bad(value, where)
            item = AttrDef(self.name, t[:-1])
            try:
                return [item.coerce(v, where) for v in value]
            except OpDefinitionError:
                raise self._bad(value, where) from None
        raise AssertionError(t)

    def _bad(self, value: Any, where: str) -> OpDefinitionError:
        return OpDefinitionError(f"{where}: attribute '{self.name}' expects {self.type}, "
                                 f"got {type(value).__name__} {value!r}")


class InferContext:
    """What a shape-inference rule sees: input types by slot, attributes, error helper."""

    __slots__ = ("op_type", "ins", "attrs")

    def __init__(self, op_type: str, ins: dict[str, list[TensorType]], attrs: dict[str, Any]):
        self.op_type, self.ins, self.attrs = op_type, ins, attrs

    def x(self, slot: str) -> TensorType:
        return self.ins[slot][0]

    def xs(self, slot: str) -> list[TensorType]:
        return self.ins.get(slot, [])

    def has(self, slot: str) -> bool:
        return bool(self.ins.get(slot))

    def __getitem__(self, attr: str) -> Any:
        return self.attrs[attr]

    def check(self, cond: bool, message: str) -> None:
        if not cond:
            raise ShapeError(f"{self.op_type}: {message}")


InferFn = Callable[[InferContext], dict[str, TensorType | list[TensorType]]]


@dataclass
class OpDef:
    """Definition of one op type. ``infer`` maps input types and attrs to output types."""

    type: str
    inputs: tuple[SlotDef, ...]
    outputs: tuple[SlotDef, ...]
    attrs: dict[str, AttrDef]
    infer: InferFn
    traits: frozenset[str] = frozenset()
    # output slot -> input slot whose buffer the output may reuse (in-place candidates)
    inplace: dict[str, str] = field(default_factory=dict)
    # grad maker hook: (op view, grad-of-output names) -> grad op descriptions (set by backward)
    grad_maker: Callable | None = None
    doc: str = ""
    # input slots that accept row-sparse values (SelectedRows); every other slot refuses them,
    # so an op whose rule expects arrays never receives one (its inference would pass the
    # sparse type through unexamined)
    sparse_inputs: frozenset[str] = frozenset()
    # LoD (docs/lod.md): the input slots that accept LoD values (every other slot refuses
    # them) and how the op treats them: "rowwise" (inference and the rule see the packed
    # tokens as a dense tensor; each output in ``lod_outputs`` takes the LoD of the LoD
    # inputs among its listed slots) or "aware" (inference and rule handle LoD themselves)
    lod_inputs: frozenset[str] = frozenset()
    lod: str = ""
    lod_outputs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # a row-wise op's last word: (attrs, input types, {slot: LoD level of LoD inputs},
    # outputs with LoD attached) -> outputs; refuses what crosses tokens (softmax on axis 0)
    # or drops the LoD where the token dimension is reduced (reduce_sum over dim 0)
    lod_fixup: Callable | None = None
    # the deepest LoD level the op takes (set with the LoD rule): row-wise ops any
    # (MAX_LOD_LEVEL: their rules see the tokens), aware ops AWARE_LOD_LEVEL unless they opt in
    max_lod_level: int = 0
    # the gradient (docs/adding_an_op.md): which forward slots ``T_grad`` reads (None: every
    # forward input; Paddle's relu_grad reads Out, not X); {input slot: slot whose type its
    # gradient takes} for a grad op that does not read that input; (slot, bool attribute):
    # that input's gradient is row-sparse when the attribute is set (lookup_table's W)
    grad_reads: tuple[str, ...] | None = None
    grad_type_from: dict[str, str] = field(default_factory=dict)
    sparse_grad: tuple[str, str] | None = None
    # regions (docs/control_flow.md): the "str" attributes holding a nested graph in the text
    # form (a loop's body, a branch); printed as indented blocks, parsed back, verified
    regions: tuple[str, ...] = ()

    def __post_init__(self):
        self.input_names = tuple(s.name for s in self.inputs)
        self.output_names = tuple(s.name for s in self.outputs)
        self._in = {s.name: s for s in self.inputs}
        self._out = {s.name: s for s in self.outputs}
        unknown = self.traits - TRAITS
        if unknown:
            raise AssertionError(f"{self.type}: unknown traits {sorted(unknown)}")

    def has_trait(self, trait: str) -> bool:
        return trait in self.traits

    @property
    def grad_read_slots(self) -> tuple[str, ...]:
        """The forward slots ``T_grad`` reads: ``grad_reads``, else every forward input."""
        return self.input_names if self.grad_reads is None else self.grad_reads

    # -- checks shared by the Program builder and the verifier --------------------------
    def normalize_attrs(self, attrs: dict[str, Any], where: str) -> dict[str, Any]:
        """Check names and types, fill defaults; returns a new dict in schema order."""
        for name in attrs:
            if name not in self.attrs:
                raise OpDefinitionError(
                    f"{where}: unknown attribute '{name}' for op {self.type}; "
                    f"expected one of {sorted(self.attrs) or 'none'}")
        out = {}
        for name, adef in self.attrs.items():
            if name in attrs:
                out[name] = adef.coerce(attrs[name], where)
            elif adef.default is REQUIRED:
                raise OpDefinitionError(f"{where}: op {self.type} requires attribute '{name}'")
            else:
                d = adef.default
                out[name] = list(d) if isinstance(d, list | tuple) else d
        return out

    def check_slots(self, kind: str, given: dict[str, list], where: str) -> None:
        """Check slot names and arities (``kind`` is 'input' or 'output')."""
        slots = self._in if kind == "input" else self._out
        for name, args in given.items():
            if name == CONTROL_SLOT and kind == "input":
                continue  # any op may wait for others (control dependencies)
            if name not in slots:
                raise OpDefinitionError(
                    f"{where}: op {self.type} has no {kind} slot '{name}'; "
                    f"expected one of {list(slots) or 'none'}")
            if len(args) > 1 and not slots[name].duplicable:
                raise OpDefinitionError(
                    f"{where}: {kind} slot '{name}' of op {self.type} takes one value, "
                    f"got {len(args)}")
        for s in slots.values():
            if not s.optional and not given.get(s.name):
                raise OpDefinitionError(
                    f"{where}: op {self.type} is missing required {kind} slot '{s.name}'")

    def infer_types(self, ins: dict[str, list[TensorType]], attrs: dict[str, Any],
                    where: str) -> dict[str, list[TensorType]]:
        """Run shape/dtype inference; errors name the op and ``where``."""
        for slot, types in ins.items():  # plain loops: this runs for every op built or verified
            for t in types:
                # waiting for a value (a control dependency) reads no data
                if t.sparse and slot not in self.sparse_inputs and slot != CONTROL_SLOT:
                    raise self._refuse_sparse(slot, where)
                if t.lod_level and slot != CONTROL_SLOT and (
                        slot not in self.lod_inputs or t.lod_level > self.max_lod_level):
                    raise self._refuse_lod(slot, t, where)
        lod_in = self.lod == "rowwise" and _lod_levels(ins)
        typed = ins
        if lod_in:  # the rule works on the packed tokens: infer on dense types
            ins = {s: [t.with_lod(0) for t in ts] for s, ts in ins.items()}
        try:
            result = self.infer(InferContext(self.type, ins, attrs))
        except ShapeError as exc:
            raise ShapeError(f"{where}: {exc}") from None
        out = {k: (v if isinstance(v, list) else [v]) for k, v in result.items()}
        return self._rowwise_lod(lod_in, ins, attrs, out, where, typed) if lod_in else out

    def _rowwise_lod(self, levels: dict[str, int], ins, attrs, out, where: str, typed):
        """Outputs of a row-wise op take the LoD of their source slots' LoD inputs."""
        for slot, types in ins.items():
            if slot in levels or slot not in self.lod_inputs or not types:
                continue
            ref = next((ins[s][0] for s in levels if s in self.lod_inputs and ins.get(s)), None)
            # a dense operand beside a LoD one broadcasts over its tokens, or (same rank,
            # Paddle's dims[0] == dims[0]) pairs with them row for row: CTR-DNN's dense
            # label beside a LoD prediction; the rows must equal the tokens (a data check)
            for t in types:
                if ref is not None and t.rank < ref.rank and attrs.get("axis", -1) == 0:
                    raise ShapeError(
                        f"{where}: input '{slot}' ({t}) is dense but spans the token "
                        f"dimension of the LoD input '{next(iter(levels))}' on axis 0 "
                        "with a lower rank; give it the LoD value's rank (row for row with "
                        "the tokens) or broadcast it over the trailing dimensions")
        for slot, types in out.items():
            # listed outputs take their sources' LoD, unlisted ones none; no list: every one
            sources = self.lod_outputs.get(slot, () if self.lod_outputs else self.lod_inputs)
            found = {levels[s] for s in sources if s in levels}
            if len(found) > 1:
                raise ShapeError(f"{where}: LoD inputs of op {self.type} have different LoD "
                                 f"levels {sorted(found)}; they must share one LoD")
            if found:
                level = found.pop()
                out[slot] = [t.with_lod(level) if t.rank else t for t in types]
        if self.lod_fixup is not None:
            try:
                # the fixup sees the inputs' own types: which values are LoD, not only slots
                out = self.lod_fixup(attrs, typed, levels, out)
            except ShapeError as exc:
                raise ShapeError(f"{where}: {exc}") from None
        return out

    def _refuse_lod(self, slot: str, t: TensorType, where: str) -> ShapeError:
        if slot in self.lod_inputs:
            return ShapeError(
                f"{where}: input '{slot}' of op {self.type} is a level-{t.lod_level} LoD value "
                f"({t}); this op reads the LoD itself and takes at most level "
                f"{self.max_lod_level}. Drop a level first, or see docs/lod.md")
        accepting = sorted(k for k, d in _REGISTRY.items() if d.lod_inputs
                           and not k.endswith("_grad"))
        return ShapeError(
            f"{where}: input '{slot}' of op {self.type} is a LoD value ({t}: variable-length "
            f"sequences), which this op does not take; ops that do: {', '.join(accepting)}. "
            "Pool the sequences first (sequence_pool) or see docs/lod.md")

    def _refuse_sparse(self, slot: str, where: str) -> ShapeError:
        accepting = sorted(t for t, d in _REGISTRY.items() if d.sparse_inputs)
        return ShapeError(
            f"{where}: input '{slot}' of op {self.type} is a row-sparse value (SelectedRows), "
            f"which this op does not take; ops that do: {', '.join(accepting)}. Densify it "
            "with get_tensor_from_selected_rows, or build the embedding with is_sparse=False")


def _lod_levels(ins: dict[str, list[TensorType]]) -> dict[str, int]:
    """Slot -> LoD level of the slots holding LoD values (empty when none does)."""
    levels = {}
    for slot, types in ins.items():
        for t in types:
            if t.lod_level and slot != CONTROL_SLOT:
                levels[slot] = t.lod_level
    return levels


# registry: op definitions (register)
_REGISTRY: dict[str, OpDef] = {}


def register(op_type: str, inputs: str = "", outputs: str = "Out", attrs=None, *,
             infer: InferFn, traits=(), inplace=None, doc: str = "",
             sparse_inputs=(), lod_inputs=(), lod: str = "", lod_outputs=None,
             lod_fixup: Callable | None = None, max_lod_level: int | None = None,
             grad_reads=None, grad_type_from=None,
             sparse_grad: tuple[str, str] | None = None, regions=()) -> OpDef:
    """Register an op: everything graphc knows about it, in one call (docs/adding_an_op.md).

    Slots are a space-separated spec string: ``"X Y Bias?"``. ``sparse_inputs``: input
    slots that accept row-sparse values; ``lod_inputs``, ``lod``, ``lod_outputs`` and
    ``lod_fixup``: which slots take LoD values and how (see OpDef, docs/lod.md);
    ``max_lod_level``: an aware op's opt-in to levels past AWARE_LOD_LEVEL;
    ``grad_reads``, ``grad_type_from`` and ``sparse_grad``: what its derived ``T_grad``
    reads and produces (see OpDef); ``regions``: attributes holding nested graphs."""
    if op_type in _REGISTRY:
        raise AssertionError(f"op {op_type} registered twice")
    adefs = {}
    for name, spec in (attrs or {}).items():
        typ, default = spec if isinstance(spec, tuple) else (spec, REQUIRED)
        assert typ in _ATTR_TYPES, (op_type, name, typ)
        adefs[name] = AttrDef(name, typ, default)
    opdef = OpDef(op_type, tuple(SlotDef.parse(s) for s in inputs.split()),
                  tuple(SlotDef.parse(s) for s in outputs.split()), adefs, infer,
                  frozenset(traits), dict(inplace or {}), doc=doc,
                  sparse_inputs=frozenset(sparse_inputs),
                  grad_reads=None if grad_reads is None else tuple(grad_reads),
                  grad_type_from=dict(grad_type_from or {}), sparse_grad=sparse_grad,
                  regions=tuple(regions))
    # a "strs" region is a list of graphs (the branches of a switch), each printed as a block
    assert all(adefs.get(r) is not None and adefs[r].type in ("str", "strs")
               for r in opdef.regions), (op_type, "regions name str(s) attributes", opdef.regions)
    slots = set(opdef.input_names) | set(opdef.output_names)
    unknown = opdef.sparse_inputs - set(opdef.input_names)
    assert not unknown, (op_type, "sparse_inputs names unknown slots", sorted(unknown))
    unknown = (set(opdef.grad_reads or ()) | set(opdef.grad_type_from.values())) - slots - {
        s + "@GRAD" for s in opdef.output_names}
    unknown |= set(opdef.grad_type_from) - set(opdef.input_names)
    assert not unknown, (op_type, "grad keywords name unknown slots", sorted(unknown))
    if sparse_grad is not None:
        slot, attr = sparse_grad
        assert slot in opdef.input_names and attr in adefs, (op_type, "sparse_grad", sparse_grad)
    if lod_inputs:
        set_lod_rule(opdef, lod or "rowwise", lod_inputs, lod_outputs, lod_fixup,
                     max_lod_level)
    else:
        assert not (lod or lod_outputs or lod_fixup or max_lod_level), (
            op_type, "LoD keywords need lod_inputs")
    _REGISTRY[op_type] = opdef
    return opdef


def get_op_def(op_type: str, where: str = "") -> OpDef:
    try:
        return _REGISTRY[op_type]
    except KeyError:
        prefix = f"{where}: " if where else ""
        raise UnknownOpError(f"{prefix}unknown op type '{op_type}'") from None


def has_op_def(op_type: str) -> bool:
    return op_type in _REGISTRY


def all_op_types() -> list[str]:
    return sorted(_REGISTRY)


LOD_MODES = ("rowwise", "aware")


def set_lod_rule(opdef: OpDef | str, mode: str, inputs, outputs=None, fixup=None,
                 max_level: int | None = None) -> OpDef:
    """Declare how an op treats LoD values (docs/lod.md): ``mode`` "rowwise" or "aware",
    ``inputs`` the slots that take them, ``outputs`` {output slot: input slots whose LoD it
    takes} for a row-wise op (default: every output from every LoD input), ``fixup`` see
    ``OpDef.lod_fixup``, ``max_level`` the deepest level taken (default: every level for a
    row-wise op, AWARE_LOD_LEVEL for an aware one). An op family declares these as
    ``register``'s keywords; this is the hook ``register`` and the derived ``T_grad``
    definitions (grad_defs) share."""
    opdef = get_op_def(opdef) if isinstance(opdef, str) else opdef
    assert mode in LOD_MODES, (opdef.type, mode)
    inputs = frozenset(inputs)
    unknown = inputs - set(opdef.input_names) | set(outputs or {}) - set(opdef.output_names)
    assert not unknown, (opdef.type, "LoD rule names unknown slots", sorted(unknown))
    opdef.lod_inputs, opdef.lod = inputs, mode
    opdef.lod_outputs = {k: tuple(v) for k, v in (outputs or {}).items()}
    opdef.lod_fixup = fixup
    if max_level is None:
        max_level = MAX_LOD_LEVEL if mode == "rowwise" else AWARE_LOD_LEVEL
    assert 1 <= max_level <= MAX_LOD_LEVEL, (opdef.type, "max_lod_level", max_level)
    opdef.max_lod_level = max_level
    return opdef
