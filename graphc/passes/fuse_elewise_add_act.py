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

from collections.abc import Callable

from ..ir.grad_defs import GRAD_SUFFIX
from ..ir.graph import Graph, Op
from ..ops.fused_elementwise.defs import ACTIVATION_ATTRS, BINARY, FUSED_GRAD_OP, FUSED_OP
from .infra.base import Pass, PassContext, members_of, register_pass
from .infra.driver import run_patterns
from .infra.guards import NoControlDeps, OnlyReadBy, SameRole
from .infra.pattern import Extension, Match, Node, Pattern
from .infra.rewrite import replace_ops

BINARY_GRAD = BINARY + "_grad"
OUT_GRAD, X_GRAD = "Out" + GRAD_SUFFIX, "X" + GRAD_SUFFIX
GRAD_NOUN = "intermediate gradient"


def _act_attrs(op: Op, act: str) -> dict:
    return {name: op.attrs[name] for name in ACTIVATION_ATTRS[act]}


def _other(slot: str) -> str:
    return "X" if slot == "Y" else "Y"


def _act_of(grad: Op) -> str:
    return grad.type.removesuffix("_grad")


def _reads_forward(g1: Op) -> bool:
    return g1.input("Out") is not None or g1.input("X") is not None


def _pairs_with(g1: Op, act_op: Op) -> bool:
    """``g1`` is the gradient of ``act_op``: its type, and the same attributes."""
    act = act_op.type
    return g1.type == act + "_grad" and _act_attrs(g1, act) == _act_attrs(act_op, act)


def _same_axis(a: str) -> Callable[[Op, Match], bool]:
    return lambda op, m: op.attrs["axis"] == m[a].attrs["axis"]


# -- grad pairs (g2 = elementwise_add_grad, g1 = the activation's grad, dt between them) ----
def _act_add_grad_nodes(slot: str, act_grads: set[str], where=None) -> tuple[Node, Node]:
    """``g2 -> d(slot) -> g1``, where g2's ``slot`` input t is the activation's output."""
    other = _other(slot)

    def g1_fits(g1: Op, m: Match) -> bool:
        if not _reads_forward(g1):
            return False
        if g1.input("X") is not None:  # it reads the act's input: t must be act(that input)
            fwd = m.t.producer
            if fwd is None or not _pairs_with(g1, fwd) or fwd.input("X") is not g1.input("X"):
                return False
        return where is None or where(g1, m)

    return (Node("g2", BINARY_GRAD, ins={slot: "t", other: "b", OUT_GRAD: "dout"},
                 outs={slot + GRAD_SUFFIX: "dt"}),
            Node("g1", act_grads, ins={OUT_GRAD: "dt", "Out?": "t"}, outs={X_GRAD: "da"},
                 where=g1_fits, unique=True))


def _add_act_grad_nodes(act_grads: set[str], where=None) -> tuple[Node, Node]:
    """``g1 -> dt -> g2(Out@GRAD=dt)``, g2 reading the add's operands x and y."""
    return (Node("g1", act_grads, ins={OUT_GRAD: "dout", "Out?": "out", "X?": "t"},
                 outs={X_GRAD: "dt"},
                 where=lambda g1, m: _reads_forward(g1) and (where is None or where(g1, m))),
            Node("g2", BINARY_GRAD, ins={OUT_GRAD: "dt", "X": "x", "Y": "y"}, unique=True))


# the gradient between the two grad ops is read by the second one alone
_ACT_ADD_PAIR = (OnlyReadBy("dt", (("g1", OUT_GRAD),), GRAD_NOUN),
                 NoControlDeps(("g1", "g2"), ("dt",)))
_ADD_ACT_PAIR = (OnlyReadBy("dt", (("g2", OUT_GRAD),), GRAD_NOUN),
                 NoControlDeps(("g1", "g2"), ("dt",)))


def _fuse_add_act_grad(m: Match, ctx: PassContext) -> None:
    g1, g2 = m.g1, m.g2
    act = _act_of(g1)
    inter = g1.input("X")
    ins = {"X": g2.input("X"), "Y": g2.input("Y"), "Out": g1.input("Out"),
           "IntermediateOut": inter, OUT_GRAD: g1.input(OUT_GRAD)}
    outs = {s: g2.output(s) for s in (X_GRAD, "Y" + GRAD_SUFFIX)}
    attrs = {"functor_list": [act, BINARY], "axis": g2.attrs["axis"],
             "save_intermediate_out": inter is not None, **_act_attrs(g1, act)}
    replace_ops(ctx, [g1, g2], FUSED_GRAD_OP, ins, outs, attrs, drop=[m.dt])


def _act_add_grad_fuser(slot: str):
    other = _other(slot)

    def fuse(m: Match, ctx: PassContext) -> None:
        g1, g2 = m.g1, m.g2
        act = _act_of(g1)
        ins = {other: g2.input(other), slot: g1.input("X"), "IntermediateOut": m.t,
               OUT_GRAD: g2.input(OUT_GRAD)}
        outs = {other + GRAD_SUFFIX: g2.output(other + GRAD_SUFFIX),
                slot + GRAD_SUFFIX: g1.output(X_GRAD)}
        attrs = {"functor_list": [BINARY, act], "unary_operand": slot,
                 "axis": g2.attrs["axis"], **_act_attrs(g1, act)}
        replace_ops(ctx, [g2, g1], FUSED_GRAD_OP, ins, outs, attrs, drop=[m.dt])
    return fuse


# -- forward fusions, each with its grad pair as an optional second root ------------------
def _act_add(slot: str, acts: set[str], act_grads: set[str]) -> Pattern:
    """``t = act(a); out = add(b, t)`` with t in ``slot``."""
    other = _other(slot)
    fuse_grad = _act_add_grad_fuser(slot)
    g2, g1 = _act_add_grad_nodes(slot, act_grads, where=lambda g1, m: _pairs_with(g1, m.act)
                                 and g1.input("X") in (None, m.a))

    def fuse(m: Match, ctx: PassContext) -> None:
        if m.g2 is not None:
            fuse_grad(m, ctx)
            ctx.count("fused act->add grad")
        t, add, act = m.t, m.add, m.act
        inter = t if [(op, s) for op, s, _ in ctx.graph.users(t)] != [(add, slot)] else None
        attrs = {"functor_list": [BINARY, act.type], "unary_operand": slot,
                 "axis": add.attrs["axis"], "save_intermediate_out": inter is not None,
                 **_act_attrs(act, act.type)}
        replace_ops(ctx, [act, add], FUSED_OP, {other: m.b, slot: m.a},
                    {"Out": m.out, "IntermediateOut": inter}, attrs,
                    drop=[] if inter is not None else [t])

    return Pattern(
        f"act->add ({slot})",
        (Node("add", BINARY, ins={slot: "t", other: "b"}, outs={"Out": "out"}),
         Node("act", acts, ins={"X": "a"}, outs={"Out": "t"})),
        (OnlyReadBy("t", (("add", slot), ("g2", slot), ("g1", "Out"))),
         SameRole(("act", "add")),
         NoControlDeps(("act", "add"), ("t",))),
        fuse, stat="fused act->add",
        extensions=(Extension((Node(g2.name, g2.type, g2.ins, g2.outs, unique=True,
                                    where=_same_axis("add")), g1), _ACT_ADD_PAIR),))


def _add_act(acts: set[str], act_grads: set[str]) -> Pattern:
    """``t = add(x, y); out = act(t)``."""
    g1, g2 = _add_act_grad_nodes(act_grads, where=lambda g1, m: _pairs_with(g1, m.act))

    def fuse(m: Match, ctx: PassContext) -> None:
        if m.g1 is not None:
            _fuse_add_act_grad(m, ctx)
            ctx.count("fused add->act grad")
        t, add, act = m.t, m.add, m.act
        inter = t if [(op, s) for op, s, _ in ctx.graph.users(t)] != [(act, "X")] else None
        attrs = {"functor_list": [act.type, BINARY], "axis": add.attrs["axis"],
                 "save_intermediate_out": inter is not None, **_act_attrs(act, act.type)}
        replace_ops(ctx, [add, act], FUSED_OP, {"X": m.x, "Y": m.y},
                    {"Out": m.out, "IntermediateOut": inter}, attrs,
                    drop=[] if inter is not None else [t])

    return Pattern(
        "add->act",
        (Node("add", BINARY, ins={"X": "x", "Y": "y"}, outs={"Out": "t"}),
         Node("act", acts, ins={"X": "t"}, outs={"Out": "out"})),
        (OnlyReadBy("t", (("act", "X"), ("g1", "X"))),
         SameRole(("add", "act")),
         NoControlDeps(("add", "act"), ("t",))),
        fuse, stat="fused add->act",
        extensions=(Extension((Node(g1.name, g1.type, g1.ins, g1.outs, g1.where, unique=True),
                               Node(g2.name, g2.type, g2.ins, g2.outs, unique=True,
                                    where=_same_axis("add"))), _ADD_ACT_PAIR),))


def patterns(acts: set[str]) -> list[list[Pattern]]:
    """The four phases: act->add, add->act (each with its grad pair), then the grad pairs
    whose forward stayed unfused (act->add ones first). act->add goes first, as in Paddle."""
    act_grads = {a + "_grad" for a in acts}
    return [
        [_act_add("Y", acts, act_grads), _act_add("X", acts, act_grads)],
        [_add_act(acts, act_grads)],
        [Pattern(f"act->add grad ({slot})", _act_add_grad_nodes(slot, act_grads),
                 _ACT_ADD_PAIR, _act_add_grad_fuser(slot), stat="fused act->add grad")
         for slot in ("Y", "X")],
        [Pattern("add->act grad", _add_act_grad_nodes(act_grads), _ADD_ACT_PAIR,
                 _fuse_add_act_grad, stat="fused add->act grad")],
    ]


@register_pass
class FuseElewiseAddAct(Pass):
    """Fuse elementwise_add with an activation (either order), and their grad ops."""

    name = "fuse-elewise-add-act"
    regions = "recurse"
    act_types: list[str] = list(ACTIVATION_ATTRS)

    _check = members_of("act_types", ACTIVATION_ATTRS, "activations")

    def run(self, graph: Graph, ctx: PassContext) -> None:
        run_patterns(graph, ctx, *patterns(set(self.act_types)))
