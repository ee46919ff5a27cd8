"""The Rewriter: every graph edit passes through it (insert, erase, replace, rewire).

It keeps def-use edges consistent, records provenance on new ops, and emits events.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .errors import GraphcError, ProgramError, ShapeError
from .graph import Graph, Op, Value, VarInfo
from .opdef import get_op_def
from .types import TensorType, types_compatible

Listener = Callable[[str, dict[str, Any]], None]


class Rewriter:
    """Edits one graph. ``origin`` (a pass name) is recorded in new ops' provenance.

    Events sent to listeners: insert_op, erase_op, replace_uses, set_input, set_attr,
    new_value. Listeners are called as ``listener(kind, info_dict)``.
    """

    def __init__(self, graph: Graph, origin: str | None = None):
        self.graph = graph
        self.origin = origin
        self.listeners: list[Listener] = list(graph.listeners)
        self.changed = False
        self._fresh = 0

    def _emit(self, kind: str, **info) -> None:
        self.changed = True
        for listener in self.listeners:
            listener(kind, info)

    # -- values ------------------------------------------------------------------------
    def new_value(self, name_hint: str, type: TensorType, *, stop_gradient: bool = False) -> Value:
        """A fresh temporary value named after ``name_hint`` (made unique)."""
        g = self.graph
        name = name_hint
        while name in g.vars:
            self._fresh += 1
            name = f"{name_hint}.r{self._fresh}"
        var = g._new_var(VarInfo(name, "temp", stop_gradient))
        v = g._new_value(var, 0, type)
        self._emit("new_value", value=v)
        return v

    def new_state(self, name: str, type: TensorType, initial_value: float) -> Value:
        """A new persistable variable read by the step: a graph input named ``name``
        (exactly: state is found by name in scopes and checkpoints). Its VarInfo records
        ``extra["initial_value"]``, the value a runtime fills it with while a scope lacks it
        (pass-made state has no startup program to initialise it)."""
        g = self.graph
        if name in g.vars:
            raise ProgramError(f"cannot create state '{name}': the graph already has it")
        var = g._new_var(VarInfo(name, "persistable", stop_gradient=True,
                                 extra={"initial_value": float(initial_value)}))
        v = g._new_value(var, 0, type)
        g.inputs.append(v)
        g._touch()
        self._emit("new_value", value=v)
        return v

    def value_of(self, info: VarInfo, version: int, type: TensorType) -> Value:
        """A value of variable ``info`` at ``version``, the variable added if the graph lacks
        it (by name: exact names, as a pass that builds a graph from another's pieces needs)."""
        g = self.graph
        var = g.vars.get(info.name) or g._new_var(info)
        v = g._new_value(var, version, type)
        self._emit("new_value", value=v)
        return v

    def add_graph_input(self, value: Value) -> None:
        """Make ``value`` (of this graph, without a producer) an input the step is fed with."""
        self._check_own(value, "add_graph_input")
        if self.graph.producer(value) is not None:
            raise ProgramError(f"%{value.name} has a producer; a graph input cannot")
        self.graph.inputs.append(value)
        self.graph._touch()
        self._emit("set_inputs", values=list(self.graph.inputs))

    def new_version(self, of: Value, type: TensorType | None = None) -> Value:
        """The next version of ``of``'s variable (for ops that update state in place)."""
        g = self.graph
        version = max(g._versions[of.var.name]) + 1
        v = g._new_value(of.var, version, type or of.type)
        self._emit("new_value", value=v)
        return v

    def shard_variable(self, var_name: str, nranks: int) -> None:
        """Make every replica hold only its ``[1, c]`` shard of a persistable variable: each
        version is retyped, so the ops that read or write it must be replaced by ops on
        shards (the data-parallel pass's Reduce mode does so right after)."""
        from .shapes import shard_shape
        g = self.graph
        var = g.vars.get(var_name)
        if var is None or not var.persistable:
            raise ProgramError(f"cannot shard '{var_name}': not a persistable variable")
        if var.shard is not None:
            raise ProgramError(f"'{var_name}' is already sharded over {var.shard[0]} replicas")
        versions = [v for _, v in sorted(g._versions[var_name].items())]
        whole = versions[0].type
        if any(v.type != whole for v in versions):
            raise ProgramError(f"cannot shard '{var_name}': its versions differ in type")
        try:
            piece = TensorType(shard_shape(whole.shape, nranks), whole.dtype)
        except ValueError as exc:
            raise ProgramError(f"cannot shard '{var_name}': {exc}") from None
        var.shard = (nranks, tuple(whole.shape))
        for v in versions:
            v.type = piece
        g._touch(*{op for v in versions for op in g.nx.pred[v]},
                 *{op for v in versions for op in g.nx.succ[v]})
        self._emit("shard_variable", var=var_name, nranks=nranks)

    # -- ops ---------------------------------------------------------------------------
    def create_op(self, type: str, inputs: dict[str, Value | Iterable[Value]],
                  outputs: dict[str, Value | str | Iterable[Value | str]],
                  attrs: dict[str, Any] | None = None, *, source: str | None = None,
                  derived_from: Iterable[Op] = (), role: str | None = None,
                  after: Op | None = None) -> Op:
        """Insert an op. Outputs given as strings are name hints for new values whose types
        are inferred; given Values must have no producer and match the inferred type.

        ``derived_from`` lists the ops this one replaces: it inherits their provenance,
        the first one's source line and role, and is printed next to them.
        """
        g = self.graph
        derived = list(derived_from)
        anchor = after or (derived[0] if derived else None)
        source = source if source is not None else (anchor.source if anchor else None)
        role = role or (anchor.role if anchor else "forward")
        where = f"op {type}" + (f" at {source}" if source else "")
        opdef = get_op_def(type, where)
        ins = {k: _as_list(v) for k, v in inputs.items()}
        ins = {k: v for k, v in ins.items() if v}
        outs_spec = {k: _as_list(v) for k, v in outputs.items()}
        outs_spec = {k: v for k, v in outs_spec.items() if v}
        opdef.check_slots("input", ins, where)
        opdef.check_slots("output", outs_spec, where)
        attrs = opdef.normalize_attrs(dict(attrs or {}), where)
        for vals in ins.values():
            for v in vals:
                self._check_own(v, where)
        inferred = opdef.infer_types({k: [v.type for v in vs] for k, vs in ins.items()},
                                     attrs, where)
        # Check every output before creating anything, so a refused op leaves no trace.
        for slot, items in outs_spec.items():
            types = inferred.get(slot, [])
            if len(types) != len(items):
                raise ShapeError(f"{where}: output '{slot}' given {len(items)} values but the "
                                 f"op produces {len(types)}")
            for item, t in zip(items, types):
                if isinstance(item, str):
                    continue
                self._check_own(item, where)
                if g._pred[item]:
                    raise ProgramError(f"{where}: output '{slot}' value %{item.name} already "
                                       "has a producer")
                if not types_compatible(item.type, t):
                    raise ShapeError(f"{where}: output '{slot}' value %{item.name} is "
                                     f"{item.type} but the op produces {t}")
        outs = {slot: [self.new_value(item, t) if isinstance(item, str) else item
                       for item, t in zip(items, inferred[slot])]
                for slot, items in outs_spec.items()}
        provenance = tuple(p for d in derived for p in (d.provenance or ((d.type, d.source),)))
        if anchor is not None:
            seq = anchor.seq + (next(g._ids),)
        else:
            seq = (len(g.ops_by_id) + 10**9,)
        op = g._new_op(type, attrs, source, role, seq, provenance)
        same = [d for d in derived if d.type == type]
        if len(same) == 1:  # a rebuilt op keeps its random stream (see Op.stream_key)
            op.stream_key = same[0].random_stream_key()
        if self.origin:
            op.provenance = op.provenance + (("pass", self.origin),)
        g._connect(op, ins, outs)
        self._emit("insert_op", op=op, derived_from=derived)
        return op

    def _check_own(self, v: Value, where: str) -> None:
        if not isinstance(v, Value) or v.graph is not self.graph \
                or self.graph.values.get(v.name) is not v:
            name = getattr(v, "name", v)
            raise ProgramError(f"{where}: %{name} is not a value of this graph")

    def erase_op(self, op: Op, *, erase_outputs: bool = True) -> None:
        """Remove ``op``; its outputs must be unused (and not graph outputs)."""
        g = self.graph
        outputs = list(g.nx.succ[op])
        if erase_outputs:
            for v in outputs:
                if g.nx.succ[v]:
                    users = ", ".join(u.where for u in g.nx.succ[v])
                    raise ProgramError(f"cannot erase {op.where}: its output %{v.name} is "
                                       f"still used by {users}")
                if g.is_output(v):
                    raise ProgramError(f"cannot erase {op.where}: its output %{v.name} is "
                                       "a graph output")
        inputs = list(g.nx.pred[op])
        g.nx.remove_node(op)
        del g.ops_by_id[op.id]
        g._touch()
        if erase_outputs:
            for v in outputs:
                self._drop_value(v)
        self._emit("erase_op", op=op, inputs=inputs)

    def _drop_value(self, v: Value) -> None:
        self.graph._remove_value(v)

    def erase_value(self, v: Value) -> None:
        """Remove an unused value with no producer (e.g. an input nothing reads)."""
        g = self.graph
        if g.nx.pred[v] or g.nx.succ[v]:
            raise ProgramError(f"cannot erase %{v.name}: it is still defined or used")
        if g.is_output(v):
            raise ProgramError(f"cannot erase %{v.name}: it is a graph output")
        if v.var.kind != "temp" and v in g.inputs:  # inputs are feeds and state, never temps
            g.inputs.remove(v)
        self._drop_value(v)
        g._touch()
        self._emit("erase_value", value=v)

    def replace_all_uses(self, old: Value, new: Value, *, except_ops: Iterable[Op] = (),
                         include_outputs: bool | None = None) -> int:
        """Make every user of ``old`` read ``new``, and graph outputs name ``new``; returns
        the count. With ``except_ops`` (typically the op that computes ``new`` from ``old``)
        graph outputs move only if ``include_outputs`` is true."""
        g = self.graph
        if old is new:
            return 0
        if not types_compatible(old.type, new.type):
            raise ShapeError(f"cannot replace %{old.name} ({old.type}) by %{new.name} "
                             f"({new.type}): types differ")
        self._check_own(new, f"replace_all_uses(%{old.name})")
        skip = set(except_ops)
        moved = 0
        for op, keys in list(g.nx.succ[old].items()):
            if op in skip:
                continue
            for key in list(keys):
                g.nx.remove_edge(old, op, key=key)
                g.nx.add_edge(new, op, key=key)
                moved += 1
            g._touch(op)
        if not skip or include_outputs:
            for i, v in enumerate(g.outputs):
                if v is old:
                    g.outputs[i] = new
                    g._outputs_version += 1
                    moved += 1
        if moved:
            self._emit("replace_uses", old=old, new=new, count=moved)
        return moved

    def replace_op(self, op: Op, replacements: dict[str, list[Value] | Value]) -> None:
        """Redirect the uses of each output slot of ``op`` to the given values, then erase it."""
        outs = self.graph.op_outputs(op)
        for slot, new_vals in replacements.items():
            for old, new in zip(outs.get(slot, []), _as_list(new_vals), strict=True):
                self.replace_all_uses(old, new)
        self.erase_op(op)

    def set_input(self, op: Op, slot: str, pos: int, value: Value) -> None:
        """Make ``op`` read ``value`` at (slot, pos); the value must have the old one's type."""
        g = self.graph
        self._check_own(value, op.where)
        current = g.op_inputs(op).get(slot, [])
        if not 0 <= pos < len(current):
            raise ProgramError(f"{op.where}: has no input '{slot}' at position {pos}")
        old = current[pos]
        if not types_compatible(old.type, value.type):
            raise ShapeError(f"{op.where}: input '{slot}' is {old.type}; cannot read "
                             f"%{value.name} ({value.type}) there")
        g.nx.remove_edge(old, op, key=(slot, pos))
        g.nx.add_edge(value, op, key=(slot, pos))
        g._touch(op)
        self._emit("set_input", op=op, slot=slot, pos=pos, old=old, new=value)

    def add_input(self, op: Op, slot: str, value: Value) -> None:
        """Append ``value`` to a duplicable slot of ``op`` (or its ``_deps`` control slot)."""
        from .opdef import CONTROL_SLOT
        g = self.graph
        self._check_own(value, op.where)
        opdef = get_op_def(op.type, op.where)
        if slot != CONTROL_SLOT and not (slot in opdef._in and opdef._in[slot].duplicable):
            raise ProgramError(f"{op.where}: '{slot}' is not a duplicable input slot")
        pos = len(g.op_inputs(op).get(slot, []))
        g.nx.add_edge(value, op, key=(slot, pos))
        g._touch(op)
        self._emit("add_input", op=op, slot=slot, pos=pos, value=value)

    def set_attr(self, op: Op, name: str, value: Any) -> None:
        """Set one attribute of ``op``. A region's new graph text (a rewritten body) must
        verify: a pass that broke a body hears it here, naming the op and region."""
        opdef = get_op_def(op.type, op.where)
        if name in opdef.regions and isinstance(value, str) and value:
            from .verify import region_graph
            try:
                region_graph(value)
            except GraphcError as exc:
                raise ProgramError(f"{op.where}: region '{name}' does not verify: "
                                   f"{type(exc).__name__}: {exc}") from None
        op.attrs = opdef.normalize_attrs({**op.attrs, name: value}, op.where)
        self.graph._touch(op)
        self._emit("set_attr", op=op, name=name, value=op.attrs[name])

    def set_outputs(self, values: list[Value]) -> None:
        self.graph.outputs = list(values)
        self.graph._outputs_version += 1
        self.graph._touch()
        self._emit("set_outputs", values=list(values))


def _as_list(v) -> list:
    if v is None:
        return []
    if isinstance(v, Value | str):
        return [v]
    return list(v)
