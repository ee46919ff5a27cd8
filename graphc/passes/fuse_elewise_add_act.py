"""fuse-elewise-add-act: fuse elementwise_add with an activation into
fused_elemwise_activation, and the matching grad ops into fused_elemwise_activation_grad
(BuildStrategy.fuse_elewise_add_act_ops; Paddle's fuse_elewise_add_act_pass).

Matches (activations: relu, tanh, sigmoid, gelu, scale, leaky_relu; ``act_types`` narrows):

* act->add: ``t = act(a); out = elementwise_add(b, t)`` (or ``add(t, b)``) becomes
  ``fused_elemwise_activation(X=b, Y=a) {functor_list=["elementwise_add", act]}`` (or
  ``X=a, Y=b`` with ``unary_operand="X"``): operands are never swapped, so Paddle's ``axis``
  broadcasting means what it meant. Tried first, as in Paddle.
* add->act: ``t = elementwise_add(x, y); out = act(t)`` becomes
  ``fused_elemwise_activation(X=x, Y=y) {functor_list=[act, "elementwise_add"]}``; x and y
  may be the same value.
* The backward of each: ``act_grad -> elementwise_add_grad`` (add->act) and
  ``elementwise_add_grad -> act_grad`` (act->add) become one fused_elemwise_activation_grad
  that reads what the two read and writes the same gradients. A forward fusion fuses its
  own grad pair with it; grad pairs whose forward stayed unfused are fused afterwards, as
  Paddle's grad patterns are.

The fused ops keep the unfused ops' values (Out, and the intermediate as IntermediateOut
while anything still reads it), so every other reader, fetch and gradient is untouched,
and carry the add's ``axis`` and the activation's attributes; provenance names both ops.

Declines (stat ``skipped: <reason>``), checked as Paddle's intermediate-node rule does but
counting what graphc's grad ops actually read:
* ``intermediate has N users``: the add's (act's) output is read by anything besides the act
  (add) and the grad ops of the fused pair. In a training graph relu/tanh/sigmoid grads read
  Out and add grads read X and Y, so add->act with those fires as it would forward-only;
  act->add (elementwise_add_grad reads t for Y's shape, relu_grad reads t as Out) and
  add->act with gelu/leaky_relu/scale (whose grads read the intermediate) fire only together
  with their grad pair, whose fused op then reads IntermediateOut. ``add(t, t)`` with
  ``t = act(a)`` reads t twice: declined.
* ``intermediate is fetched`` / ``intermediate is a graph output``.
* ``intermediate gradient has N users`` (or is fetched): for a grad pair, the gradient
  between the two grad ops must be read by the second one only.
* ``ops have different roles``, ``control dependencies`` (an op of the pattern waits on or
  is waited on by ``_deps``: run sequential-execution after this pass, as the pipeline does).

Stats: ``fused add->act``, ``fused act->add``, ``fused add->act grad``, ``fused act->add grad``.
"""

from __future__ import annotations

from ..ir.grad_defs import GRAD_SUFFIX
from ..ir.graph import Graph, Op, Value
from ..ir.opdef import CONTROL_SLOT, get_op_def
from ..ir.types import dims_compatible
from ..ops.fused_elementwise.defs import ACTIVATION_ATTRS, BINARY, FUSED_GRAD_OP, FUSED_OP
from .infra.base import Pass, PassContext, members_of, register_pass, user_count_reason

BINARY_GRAD = BINARY + "_grad"
OUT_GRAD = "Out" + GRAD_SUFFIX


def _act_attrs(op: Op, act: str) -> dict:
    return {name: op.attrs[name] for name in ACTIVATION_ATTRS[act]}


def _other(slot: str) -> str:
    return "X" if slot == "Y" else "Y"


class _Fuser:
    """One run of the pass over one graph."""

    def __init__(self, graph: Graph, ctx: PassContext, acts: set[str]):
        self.graph, self.ctx, self.rw = graph, ctx, ctx.rewriter
        self.acts = acts
        self.act_grads = {a + "_grad": a for a in acts}

    # -- queries ------------------------------------------------------------------------
    def alive(self, op: Op) -> bool:
        return self.graph.ops_by_id.get(op.id) is op

    def readers(self, value: Value) -> list[tuple[Op, str]]:
        return [(op, slot) for op, slot, _ in self.graph.users(value)]

    def control_reason(self, ops: list[Op], internal: set[Value]) -> str | None:
        """Ops of a pattern must neither wait on (``_deps``) nor be waited on through a
        value the fusion removes."""
        for op in ops:
            if op.inputs.get(CONTROL_SLOT):
                return "control dependencies"
        for v in internal:
            if any(slot == CONTROL_SLOT for _, slot in self.readers(v)):
                return "control dependencies"
        return None

    def users_reason(self, value: Value, allowed: set[tuple[Op, str]],
                     gradient: bool = False) -> str | None:
        """None when ``value`` is read exactly once through each allowed (op, slot) and by
        nothing else, and is neither fetched nor a graph output."""
        reads = self.readers(value)
        ok = (value not in self.ctx.keep and not self.graph.is_output(value)
              and len(reads) == len(allowed) and set(reads) == allowed)
        if ok:
            return None
        reason = user_count_reason(self.graph, value, self.ctx.keep)
        return reason.replace("intermediate", "intermediate gradient", 1) if gradient \
            else reason

    # -- grad pairs ---------------------------------------------------------------------
    def add_act_grad(self, g1: Op) -> Op | str | None:
        """``g1 = act_grad -> dt -> g2 = elementwise_add_grad(Out@GRAD=dt)``: g2, a decline
        reason, or None when g1 starts no such pair."""
        dt = g1.output("X" + GRAD_SUFFIX)
        if dt is None or g1.input(OUT_GRAD) is None or \
                (g1.input("Out") is None and g1.input("X") is None):
            return None
        g2s = [op for op, slot in self.readers(dt) if slot == OUT_GRAD and op.type == BINARY_GRAD]
        if len(g2s) != 1 or g2s[0].input("X") is None or g2s[0].input("Y") is None:
            return None
        g2 = g2s[0]
        return self.users_reason(dt, {(g2, OUT_GRAD)}, gradient=True) or \
            self.control_reason([g1, g2], {dt}) or g2

    def act_add_grad(self, g2: Op, slot: str) -> Op | str | None:
        """``g2 = elementwise_add_grad -> d(slot) -> g1 = act_grad``, where g2's ``slot``
        input t is act's output: g1, a decline reason, or None when there is no such pair."""
        t, other = g2.input(slot), g2.input(_other(slot))
        dt = g2.output(slot + GRAD_SUFFIX)
        if t is None or other is None or dt is None or g2.input(OUT_GRAD) is None:
            return None
        g1s = [op for op, s in self.readers(dt) if s == OUT_GRAD and op.type in self.act_grads]
        if len(g1s) != 1 or g1s[0].output("X" + GRAD_SUFFIX) is None:
            return None
        g1 = g1s[0]
        act = self.act_grads[g1.type]
        if g1.input("Out") is not None:
            if g1.input("Out") is not t:
                return None
        elif g1.input("X") is None:
            return None
        if g1.input("X") is not None:  # it reads the act's input: t must be act(that input)
            fwd = t.producer
            if fwd is None or fwd.type != act or fwd.input("X") is not g1.input("X") \
                    or _act_attrs(fwd, act) != _act_attrs(g1, act):
                return None
        return self.users_reason(dt, {(g1, OUT_GRAD)}, gradient=True) or \
            self.control_reason([g1, g2], {dt}) or g1

    # -- forward matches ------------------------------------------------------------------
    def try_act_add(self, add: Op, slot: str) -> bool | str | None:
        """Fuse ``add`` with the act producing its ``slot`` input: True, a reason, or None."""
        t = add.input(slot)
        act_op = t.producer
        if act_op is None or act_op.type not in self.acts or act_op.output("Out") is not t:
            return None
        act = act_op.type
        other = _other(slot)
        b = add.input(other)
        pair = None
        g2s = [op for op, s in self.readers(t) if s == slot and op.type == BINARY_GRAD
               and op.input(other) is b and op.attrs["axis"] == add.attrs["axis"]]
        if len(g2s) == 1:
            g1 = self.act_add_grad(g2s[0], slot)
            if isinstance(g1, Op) and g1.type == act + "_grad" \
                    and _act_attrs(g1, act) == _act_attrs(act_op, act) \
                    and g1.input("X") in (None, act_op.input("X")):
                pair = (g2s[0], g1)
        allowed = {(add, slot)}
        if pair is not None:
            g2, g1 = pair
            allowed.add((g2, slot))
            if g1.input("Out") is t:
                allowed.add((g1, "Out"))
        reason = self.users_reason(t, allowed) or self.same_role(act_op, add) or \
            self.control_reason([act_op, add], {t})
        if reason:
            return reason
        if pair is not None:
            self.fuse_act_add_grad(pair[0], pair[1], slot)
        inter = t if self.readers(t) != [(add, slot)] else None
        ins = {other: b, slot: act_op.input("X")}
        attrs = {"functor_list": [BINARY, act], "unary_operand": slot,
                 "axis": add.attrs["axis"], "save_intermediate_out": inter is not None,
                 **_act_attrs(act_op, act)}
        self.replace([act_op, add], FUSED_OP, ins,
                     {"Out": add.output("Out"), "IntermediateOut": inter}, attrs,
                     drop=[] if inter is not None else [t])
        self.ctx.count("fused act->add")
        return True

    def try_add_act(self, add: Op) -> bool | str | None:
        """Fuse ``add`` with the act reading its output: True, a reason, or None."""
        t = add.output("Out")
        acts = [op for op, s in self.readers(t) if s == "X" and op.type in self.acts]
        if not acts:
            return None
        act_op = acts[0]
        act = act_op.type
        out = act_op.output("Out")
        x, y = add.input("X"), add.input("Y")
        pair = None
        g1s = [op for op, s in self.readers(out) if s == "Out" and op.type == act + "_grad"]
        g1s += [op for op, s in self.readers(t) if s == "X" and op.type == act + "_grad"]
        if len(g1s) == 1 and _act_attrs(g1s[0], act) == _act_attrs(act_op, act):
            g2 = self.add_act_grad(g1s[0])
            if isinstance(g2, Op) and g2.input("X") is x and g2.input("Y") is y \
                    and g2.attrs["axis"] == add.attrs["axis"]:
                pair = (g1s[0], g2)
        allowed = {(act_op, "X")}
        if pair is not None and pair[0].input("X") is t:
            allowed.add((pair[0], "X"))
        reason = self.users_reason(t, allowed) or self.same_role(add, act_op) or \
            self.control_reason([add, act_op], {t})
        if reason:
            return reason
        if pair is not None:
            self.fuse_add_act_grad(*pair)
        inter = t if self.readers(t) != [(act_op, "X")] else None
        attrs = {"functor_list": [act, BINARY], "axis": add.attrs["axis"],
                 "save_intermediate_out": inter is not None, **_act_attrs(act_op, act)}
        self.replace([add, act_op], FUSED_OP, {"X": x, "Y": y},
                     {"Out": out, "IntermediateOut": inter}, attrs,
                     drop=[] if inter is not None else [t])
        self.ctx.count("fused add->act")
        return True

    def same_role(self, a: Op, b: Op) -> str | None:
        return None if a.role == b.role else "ops have different roles"

    # -- rewrites ------------------------------------------------------------------------
    def fuse_add_act_grad(self, g1: Op, g2: Op) -> None:
        act = self.act_grads[g1.type]
        inter = g1.input("X")
        ins = {"X": g2.input("X"), "Y": g2.input("Y"), "Out": g1.input("Out"),
               "IntermediateOut": inter, OUT_GRAD: g1.input(OUT_GRAD)}
        outs = {s: g2.output(s) for s in ("X" + GRAD_SUFFIX, "Y" + GRAD_SUFFIX)}
        attrs = {"functor_list": [act, BINARY], "axis": g2.attrs["axis"],
                 "save_intermediate_out": inter is not None, **_act_attrs(g1, act)}
        self.replace([g1, g2], FUSED_GRAD_OP, ins, outs, attrs,
                     drop=[g1.output("X" + GRAD_SUFFIX)])
        self.ctx.count("fused add->act grad")

    def fuse_act_add_grad(self, g2: Op, g1: Op, slot: str) -> None:
        act = self.act_grads[g1.type]
        other = _other(slot)
        ins = {other: g2.input(other), slot: g1.input("X"), "IntermediateOut": g2.input(slot),
               OUT_GRAD: g2.input(OUT_GRAD)}
        outs = {other + GRAD_SUFFIX: g2.output(other + GRAD_SUFFIX),
                slot + GRAD_SUFFIX: g1.output("X" + GRAD_SUFFIX)}
        attrs = {"functor_list": [BINARY, act], "unary_operand": slot,
                 "axis": g2.attrs["axis"], **_act_attrs(g1, act)}
        self.replace([g2, g1], FUSED_GRAD_OP, ins, outs, attrs,
                     drop=[g2.output(slot + GRAD_SUFFIX)])
        self.ctx.count("fused act->add grad")

    def replace(self, ops: list[Op], op_type: str, ins: dict, outs: dict, attrs: dict,
                drop: list[Value]) -> Op:
        """Replace ``ops`` (in program order) by one op that defines their surviving output
        values itself, so their readers are untouched; ``drop`` are the values only the
        replaced ops read. Everything is checked before the first edit."""
        ins = {k: v for k, v in ins.items() if v is not None}
        outs = {k: v for k, v in outs.items() if v is not None}
        opdef = get_op_def(op_type)
        inferred = opdef.infer_types({k: [v.type] for k, v in ins.items()},
                                     opdef.normalize_attrs(dict(attrs), op_type), op_type)
        for slot, v in outs.items():
            t = inferred[slot][0]
            assert t.dtype == v.type.dtype and dims_compatible(t.shape, v.type.shape), \
                (op_type, slot, t, v.type)
        for op in reversed(ops):  # readers first
            self.rw.erase_op(op, erase_outputs=False)
        for v in drop:
            self.rw.erase_value(v)
        return self.rw.create_op(op_type, ins, outs, attrs, derived_from=ops)

    # -- the sweeps ------------------------------------------------------------------------
    def run(self) -> None:
        graph, ctx = self.graph, self.ctx
        adds = [op for op in graph.ops() if op.type == BINARY]
        for add in adds:  # act->add first, as Paddle
            reasons = []
            for slot in ("Y", "X"):
                if not self.alive(add):
                    break
                res = self.try_act_add(add, slot)
                if res is True:
                    reasons = []
                    break
                if res:
                    reasons.append(res)
            if reasons:
                ctx.decline(reasons[0])
        for add in adds:
            if self.alive(add):
                res = self.try_add_act(add)
                if isinstance(res, str):
                    ctx.decline(res)
        # grad pairs whose forward stayed unfused (act->add ones first, as forward)
        for g2 in [op for op in graph.ops() if op.type == BINARY_GRAD]:
            reasons = []
            for slot in ("Y", "X"):
                if not self.alive(g2):
                    break
                g1 = self.act_add_grad(g2, slot)
                if isinstance(g1, Op):
                    self.fuse_act_add_grad(g2, g1, slot)
                    reasons = []
                    break
                if g1:
                    reasons.append(g1)
            if reasons:
                ctx.decline(reasons[0])
        for g1 in [op for op in graph.ops() if op.type in self.act_grads]:
            if self.alive(g1):
                g2 = self.add_act_grad(g1)
                if isinstance(g2, Op):
                    self.fuse_add_act_grad(g1, g2)
                elif g2:
                    ctx.decline(g2)


@register_pass
class FuseElewiseAddAct(Pass):
    """Fuse elementwise_add with an activation (either order), and their grad ops."""

    name = "fuse-elewise-add-act"
    act_types: list[str] = list(ACTIVATION_ATTRS)

    _check = members_of("act_types", ACTIVATION_ATTRS, "activations")

    def run(self, graph: Graph, ctx: PassContext) -> None:
        _Fuser(graph, ctx, set(self.act_types)).run()
