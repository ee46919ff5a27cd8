"""fuse-all-optimizer-ops: replace the sgd, momentum, adam and adamw ops of many parameters by
one fused_<type> op per group (BuildStrategy.fuse_all_optimizer_ops; Paddle's fuse_*_op_pass).

Matches: optimizer ops of the listed types. A group is the ops with the same type, op role,
attributes (every one, compared whole), dtypes of every per-parameter input, and the same
``LearningRate`` value; members keep their own state (velocities, moments, Beta1Pow/Beta2Pow:
graphc's optimizers create one per parameter), so a group is exactly its members' updates.

Produces: one ``fused_<type>`` op per group over the members' values in program order, with
``layout`` set by the option below. Its outputs ARE the members' output values, so every
parameter and accumulator keeps its name and SSA version: graph outputs, fetches, scope
write-back and any op reading an updated parameter are untouched. Control dependencies of
the members are merged (those between members are dropped, as Paddle's ReLinkNodes does).

Declines, with a ``skipped:`` statistic: an optimizer op of a type with no fused form
(adagrad, rmsprop, lamb, lars_momentum, ftrl, ...: ``<type>: no fused form``); an op whose
gradient is row-sparse (an
``is_sparse`` embedding's: its own op scatters the rows; Paddle skips them too); a candidate
left alone in its group (the only op
of its type, or its learning rate, attributes, dtypes or role differ from every other one:
the reason names what differs from the closest candidate); and members whose fusion would
create a cycle (one reads another's output, or depends on it through other ops), which are
split into groups that do not. Unlike Paddle it fuses every type, not only the first found,
checks the learning rate instead of taking the first op's, and keeps each Beta pow.

Layout (``python benchmarks/bench_fused_optimizer.py``: MLP 784-512x3-10 with batch_norm,
batch 128, 2-core CPU, XLA): ``multi_tensor`` (default) compiles to the same XLA program as
the unfused ops (same fusions, same bytes accessed), updating the donated state in place;
``coalesced`` (concatenate each slot, update once, split back) makes XLA copy every state
tensor into and out of the flat buffers each step, since the scope keeps one array per
variable: bytes accessed 5-6x, the update alone 2.8-3.8x slower, a training step 1.2-1.4x.
"""

from __future__ import annotations

from typing import Literal

from ..ir.graph import Graph, Op, Value
from ..ir.opdef import CONTROL_SLOT, OPTIMIZER, get_op_def
from ..ops.coalesce.defs import FUSED_OPTIMIZERS, SHARED_SLOT
from .infra.analysis import DATA_EDGE, THROUGH_OTHERS, fusion_cycle
from .infra.base import Pass, PassContext, members_of, register_pass


def _key(op: Op) -> tuple:
    """What members of one group share: (type, role, attrs, learning rate, dtypes)."""
    ins = op.inputs
    dtypes = tuple((slot, tuple(v.dtype for v in vals)) for slot, vals in ins.items()
                   if slot not in (SHARED_SLOT, CONTROL_SLOT))
    lr = ins[SHARED_SLOT][0]
    attrs = tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in sorted(op.attrs.items()))
    return (op.type, op.role, attrs, lr, dtypes)


def _differences(a: tuple, b: tuple) -> list[str]:
    """What differs between two keys of the same op type, in the words of the statistics."""
    out = []
    if a[4] != b[4]:
        out.append("dtypes")
    if a[2] != b[2]:
        names = sorted(k for (k, v), (k2, v2) in zip(a[2], b[2]) if v != v2)
        out.append(f"attributes ({', '.join(names)})")
    if a[3] is not b[3]:
        out.append("learning rate")
    if a[1] != b[1]:
        out.append("op role")
    return out


_CYCLE_REASONS = {DATA_EDGE: "reads another optimizer op's output",
                  THROUGH_OTHERS: "depends on another optimizer op through other ops"}


def _cycle(graph: Graph, members: list[Op]) -> str | None:
    """Why one op in place of ``members`` would close a cycle (in this pass's words)."""
    why = fusion_cycle(graph, members)
    return None if why is None else _CYCLE_REASONS[why]


@register_pass
class FuseAllOptimizerOps(Pass):
    """Fuse the optimizer ops that share type, hyper-parameters, dtypes and learning rate."""

    name = "fuse-all-optimizer-ops"
    regions = "decline"
    regions_reason = "optimizer ops update state, which only the outer graph holds"
    layout: Literal["multi_tensor", "coalesced"] = "multi_tensor"
    op_types: list[str] = list(FUSED_OPTIMIZERS)

    _check = members_of("op_types", FUSED_OPTIMIZERS, "optimizer ops (no fused form)")

    def run(self, graph: Graph, ctx: PassContext) -> None:
        candidates, declined = [], 0
        fused_types = set(FUSED_OPTIMIZERS.values())
        for op in graph.ops():
            if op.type not in self.op_types:
                if op.type not in FUSED_OPTIMIZERS and op.type not in fused_types \
                        and get_op_def(op.type).has_trait(OPTIMIZER):
                    # adagrad, rmsprop, lamb, ...: left as they are, and said so
                    ctx.decline(f"{op.type}: no fused form (fused: "
                                f"{', '.join(FUSED_OPTIMIZERS)})")
                    declined += 1
                continue
            if any(g.type.sparse for g in op.inputs["Grad"]):
                # as Paddle's fuse_optimizer passes, which take dense gradients only
                ctx.decline(f"{op.type}: row-sparse gradient (a fused optimizer takes dense "
                            "ones; its own op scatters the rows)")
                declined += 1
                continue
            candidates.append(op)
        if not candidates:
            if not declined:
                ctx.decline("no optimizer ops")
            return
        keys = {op: _key(op) for op in candidates}
        by_key: dict[tuple, list[Op]] = {}
        for op in candidates:
            by_key.setdefault(keys[op], []).append(op)
        for members in by_key.values():
            if len(members) == 1:
                self._decline_alone(ctx, members[0], candidates, keys)
                continue
            for group, reason in self._acyclic_groups(graph, members):
                if len(group) == 1:
                    ctx.decline(f"{group[0].type}: {reason}")
                else:
                    self._fuse(ctx, group)

    # -- grouping ----------------------------------------------------------------------
    @staticmethod
    def _acyclic_groups(graph: Graph, members: list[Op]) -> list[tuple[list[Op], str]]:
        """Split ``members`` (one key, program order) into groups whose fusion closes no
        cycle: all of them in the usual case, else first fit in program order. Each group
        comes with why its first op joined no earlier group ("" when it is the first)."""
        if _cycle(graph, members) is None:
            return [(members, "")]
        groups: list[tuple[list[Op], str]] = []
        for op in members:
            why = ""
            for group, _ in groups:
                problem = _cycle(graph, group + [op])
                if problem is None:
                    group.append(op)
                    break
                why = why or problem
            else:
                groups.append(([op], why or "would create a cycle"))
        return groups

    @staticmethod
    def _decline_alone(ctx: PassContext, op: Op, candidates: list[Op], keys: dict) -> None:
        others = [o for o in candidates if o.type == op.type and o is not op]
        if not others:
            ctx.decline(f"{op.type}: only op of its type")
            return
        closest = min((_differences(keys[op], keys[o]) for o in others), key=len)
        ctx.decline(f"{op.type}: different {' and '.join(closest)}")

    # -- rewriting ---------------------------------------------------------------------
    def _fuse(self, ctx: PassContext, members: list[Op]) -> None:
        rw = ctx.rewriter
        base = get_op_def(members[0].type)
        fused_type = FUSED_OPTIMIZERS[base.type]
        member_ins = [m.inputs for m in members]
        member_outs = [m.outputs for m in members]
        ins: dict[str, Value | list[Value]] = {}
        for slot in base.input_names:
            ins[slot] = member_ins[0][slot][0] if slot == SHARED_SLOT \
                else [mi[slot][0] for mi in member_ins]
        produced = {v for mo in member_outs for vals in mo.values() for v in vals}
        deps = [v for mi in member_ins for v in mi.get(CONTROL_SLOT, ()) if v not in produced]
        if deps:
            ins[CONTROL_SLOT] = list(dict.fromkeys(deps))
        outs = {slot: [mo[slot][0] for mo in member_outs] for slot in base.output_names}
        attrs = {**members[0].attrs, "layout": self.layout}
        # Check the fused op before the members go, so a refusal leaves the graph as it was.
        opdef = get_op_def(fused_type)
        where = f"{fused_type} replacing {members[0].where}"
        opdef.infer_types({s: [x.type for x in (v if isinstance(v, list) else [v])]
                           for s, v in ins.items()},
                          opdef.normalize_attrs(dict(attrs), where), where)
        for m in members:
            rw.erase_op(m, erase_outputs=False)
        rw.create_op(fused_type, ins, outs, attrs, derived_from=members, role=members[0].role)
        ctx.count("groups")
        ctx.count("fused", len(members))
        ctx.count(f"fused {base.type}", len(members))
