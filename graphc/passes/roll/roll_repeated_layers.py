"""roll-repeated-layers: replace k >= min_repeats consecutive isomorphic layers (forward,
backward or optimizer ops) by one scan_layers op over their stacked per-layer inputs.

**Matches.** Ops are taken in the graph's stable topological order and each gets a signature
(type, role, attributes, input and output slots with their types). For every period
p <= ``max_period`` the pass finds maximal stretches where op i and op i + p have the same
signature (a linear sweep per period; no whole-graph isomorphism); a stretch of length L
holds floor((L + p) / p) candidate layers of p ops. Candidates are taken by ops covered,
largest first, without overlap; for each, every phase (which op starts a layer) is tried and
the one giving most layers kept. Layer j's ops are then checked to have the same def-use
shape as layer 1: each input is read from the same op/slot of the same layer, from the
*previous* layer (a carry), or from outside the run: the same value in every layer (a
constant: the learning rate) or one value per layer (a per-layer input: parameters, saved
activations, gradients). Layer 0 reads one outside value (the initial carry) wherever later
layers read a carry. A run ends at the first layer that breaks the shape.

**Produces.** ``scan_layers`` whose ``body`` attribute is layer 1 as a graph in graphc's text
IR (inputs: carries, per-layer slices, constants; outputs: carries out, then the values some
layer's op outside the run reads, or a fetch or graph output names), and ``iterations`` = k.
Per-layer inputs go in through ``stack`` ops; exported per-layer values come out stacked and
are split by ``unstack`` ops into the very values (same names) the unrolled graph had, so
scopes, fetches and later passes still find parameters by their Paddle names. A carry read
outside only after the last layer is the op's ``Out``. Finally a ``stack`` whose inputs are
a run of one ``unstack``'s outputs, in order or reversed, reads the stacked array itself
(sliced, and ``reverse``d for backward runs, which visit layers in reverse order).

**Stacked state** (``stack_state``, on by default; stack_rolled_state.py). The k parameters
of a rolled run, and their optimizer accumulators updated in the same scan, then become one
persistable ``<first member>@STACK<k>`` variable of type [k, ...] whose VarInfo lists its
members in order (``stack_of``, printed and parsed): the step reads and writes the stack
itself, with no ``stack``/``unstack`` of state left (an unrolled op that reads a member, the
first layer's backward, reads a ``slice`` row). Scopes keep it as one device array and answer,
list, write and checkpoint the members by Paddle name (runtime/stacked_state.py); a program
compiled without the pass that reads a member gets the stack split back first. Without this,
XLA:CPU compiles the per-step stacking of thousands of per-name parameters more slowly than
the unrolled layers. A family stays per name when a member is fetched or kept by name, or is
not updated by one rolled optimizer run in layer order.

**Declines** (``skipped:`` statistics), the whole run: fewer than ``min_repeats`` layers
after the shape check; a layer op that draws random numbers (dropout: each layer's mask
uses its own seed), is a collective or cross-replica op, reads or writes a row-sparse value,
reads an integer value (ids and labels carry data checks that must stay per op), reads or
writes a LoD value (scan_layers carries dense values; docs/lod.md), waits on
control dependencies, or is itself a scan; optimizer ops when ``roll_optimizer`` is false
(data-parallel training: the data-parallel pass must see each optimizer op). Every run, when
all of them are independent updates (no forward or backward layer repeats) of at most
``min_update_only_ops`` ops in all: stacking their state would cost each step more than
rolling them saves (``_updates_alone``).

**Exactness.** Every op of the body runs with its own lowering rule on the same values; the
interpreter loops over the body, so its results are bitwise those of the unrolled graph.
Under XLA (graphc/ops/scan/lowering.py) a body without carries runs batched over the stack
and one with carries is a while loop, unrolled when the layers hold at most 512 ops in all:
tests compare with the unrolled graph to 1e-6.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from ...ir.grad_defs import forward_type
from ...ir.graph import Graph, Op, Value, VarInfo
from ...ir.opdef import COLLECTIVE, CONTROL_SLOT, OPTIMIZER, RANDOM, get_op_def
from ...ir.rewriter import Rewriter
from ..infra.base import Pass, PassContext, register_pass
from .stack_rolled_state import stack_state

_CROSS_REPLICA = {"sync_batch_norm", "sync_batch_norm_grad"}


def _decline_reason(graph: Graph, op: Op, roll_optimizer: bool) -> str | None:
    """Why ``op`` may not be part of a rolled layer, or None."""
    types = [t for t in (op.type, forward_type(op.type)) if t is not None]
    defs = [get_op_def(t) for t in types]
    if any(d.has_trait(RANDOM) for d in defs):
        return f"layer has a random op ({op.type}: per-layer seeds differ)"
    if any(d.has_trait(COLLECTIVE) for d in defs) or op.type in _CROSS_REPLICA:
        return f"layer has a collective op ({op.type})"
    if op.type == "scan_layers":
        return "layer has a scan_layers op"
    if not roll_optimizer and defs[0].has_trait(OPTIMIZER):
        return "optimizer ops are not rolled (roll_optimizer=false)"
    ins, outs = graph.op_inputs(op), graph.op_outputs(op)
    if CONTROL_SLOT in ins:
        return "layer op has control dependencies"
    for vals in (*ins.values(), *outs.values()):
        for v in vals:
            if v.type.sparse:
                return "layer reads or writes a row-sparse value"
            if v.type.lod_level:  # scan_layers carries dense values only (docs/lod.md)
                return "layer reads or writes a LoD value (variable-length sequences)"
    for vals in ins.values():
        for v in vals:
            if v.type.dtype.startswith(("int", "uint")):
                return f"layer op {op.type} reads an integer value (ids/labels are checked)"
    return None


def _signature(graph: Graph, op: Op) -> tuple:
    ins, outs = graph.op_inputs(op), graph.op_outputs(op)
    return (op.type, op.role, repr(sorted(op.attrs.items())),
            tuple((s, tuple(v.type for v in vs)) for s, vs in ins.items()),
            tuple((s, tuple(v.type for v in vs)) for s, vs in outs.items()))


def _ops_in(layers: list[list[Op]]) -> int:
    return sum(len(layer) for layer in layers)


class _Run:
    """One analysed window: ``layers[j]`` are the ops of layer j."""

    def __init__(self, layers: list[list[Op]]):
        self.layers = layers


@register_pass
class RollRepeatedLayers(Pass):
    """Roll runs of isomorphic consecutive layers into one scan_layers op (lax.scan)."""

    name = "roll-repeated-layers"
    regions = "decline"
    regions_reason = ("stacked state belongs to the outer graph; a region op is one op of the "
                      "layers it compares")
    min_repeats: int = 4
    max_period: int = 64
    roll_optimizer: bool = True
    stack_state: bool = True
    # -- small28: a graph whose only runs are independent updates rolls them only past this
    # many ops (see ``_updates_alone``)
    min_update_only_ops: int = 512

    # -- matching ------------------------------------------------------------------------
    def _candidates(self, sig_ids: np.ndarray) -> list[tuple[int, int, int]]:
        """(start, period, length in ops) of maximal periodic stretches, best first."""
        n = len(sig_ids)
        cands = []
        for p in range(1, min(self.max_period, n // max(self.min_repeats, 1)) + 1):
            eq = (sig_ids[:-p] == sig_ids[p:]).astype(np.int8)
            d = np.diff(np.concatenate(([0], eq, [0])))
            starts, ends = np.flatnonzero(d == 1), np.flatnonzero(d == -1)
            for s, e in zip(starts.tolist(), ends.tolist()):
                length = e - s + p
                if length // p >= self.min_repeats:
                    cands.append((s, p, length))
        cands.sort(key=lambda c: (-(c[2] // c[1]) * c[1], c[1], c[0]))
        return cands

    def _layer_shape(self, graph, layer, prev_pos, pos, j):
        """Layer j's def-use descriptor: per input, ('in'|'carry', key) or ('ext',); None
        with a reason when it reads from two or more layers back."""
        desc = []
        for op in layer:
            for vals in graph.op_inputs(op).values():
                for v in vals:
                    prod = graph.producer(v)
                    where = pos.get(prod) if prod is not None else None
                    if where is None:
                        desc.append(("ext",))
                    elif where[0] == j:
                        desc.append(("in", where[1], self._out_key(graph, prod, v)))
                    elif where[0] == j - 1:
                        desc.append(("carry", where[1], self._out_key(graph, prod, v)))
                    else:
                        return None
        return tuple(desc)

    @staticmethod
    def _out_key(graph, op, v):
        for slot, vals in graph.op_outputs(op).items():
            for i, x in enumerate(vals):
                if x is v:
                    return (slot, i)
        raise AssertionError(v)

    def _analyse(self, graph, ops, start, p, k):
        """The longest valid prefix of the window (as layers), or (None, reason)."""
        layers = [ops[start + j * p:start + (j + 1) * p] for j in range(k)]
        pos = {}
        for j, layer in enumerate(layers):
            for t, op in enumerate(layer):
                pos[op] = (j, t)
        descs = [self._layer_shape(graph, layer, None, pos, j) for j, layer in enumerate(layers)]
        if descs[0] is None or len(descs) < 2 or descs[1] is None:
            return None, "layers read values from two layers back"
        ref = descs[1]
        first = tuple(("ext",) if d[0] == "carry" else d for d in ref)
        if descs[0] != first:
            return None, "the first layer's def-use shape differs"
        n = 2
        while n < k and descs[n] == ref:
            n += 1
        if n < self.min_repeats:
            return None, f"run shorter than min_repeats ({n} layers)"
        return layers[:n], None

    # -- the pass ------------------------------------------------------------------------
    def run(self, graph: Graph, ctx: PassContext) -> None:
        ops = list(graph.ops())
        if len(ops) < 2 * self.min_repeats:
            ctx.decline("graph too small to hold repeated layers")
            return
        ids: dict[tuple, int] = {}
        sig_ids = np.array([ids.setdefault(_signature(graph, op), len(ids)) for op in ops],
                           dtype=np.int64)
        taken = np.zeros(len(ops), dtype=bool)
        runs = []
        for s, p, length in self._candidates(sig_ids):
            if taken[s:s + length].any():
                continue
            taken[s:s + length] = True
            reason = next((r for op in ops[s:s + p]
                           if (r := _decline_reason(graph, op, self.roll_optimizer))), None)
            if reason is None and p > 1 and len(ops[s:s + p]) == p:
                reason = _decline_reason(graph, ops[s + p], self.roll_optimizer)
            if reason is not None:
                ctx.decline(reason)
                continue
            best, why = None, "run shorter than min_repeats"
            for r in range(p):
                k = (length - r) // p
                if k < self.min_repeats:
                    break
                layers, why_r = self._analyse(graph, ops, s + r, p, k)
                if layers is not None and (best is None or len(layers) > len(best)):
                    best = layers
                why = why_r or why
            if best is None:
                ctx.decline(why)
                continue
            runs.append(best)
        if runs and self._updates_alone(graph, runs):
            ctx.decline(f"only optimizer updates repeat ({sum(map(_ops_in, runs))} ops <= "
                        f"min_update_only_ops {self.min_update_only_ops}): rolling them "
                        "alone costs steady time and saves no compile")
            return
        done = []
        for layers in runs:
            reason = self._roll(graph, ctx, layers)
            if reason:
                ctx.decline(reason)
                continue
            done.append(layers)
            ctx.count("rolled runs")
            ctx.count("rolled layers", len(layers))
        runs = done
        if runs:
            fold_stacks(graph, ctx)
            if self.stack_state:
                stack_state(graph, ctx)

    def _updates_alone(self, graph: Graph, runs: list) -> bool:
        """Whether every run is a batch of independent layers (no layer reads the one
        before: optimizer updates) holding at most ``min_update_only_ops`` ops in all.
        Why decline them: XLA compiles a few hundred update ops quickly either way, while
        rolling them stacks their parameters, so every unrolled forward and backward op
        reads its weight through a slice and the gradients are concatenated each step
        (ResNet-20, 18 momentum ops in 3 runs: 2-3% slower steady than unrolled; issue 28).
        Where forward or backward layers roll too, their loop's saving pays for it."""
        if sum(map(_ops_in, runs)) > self.min_update_only_ops:
            return False
        for layers in runs:
            first = set(layers[0])
            if any(graph.producer(v) in first for op in layers[1]
                   for vals in graph.op_inputs(op).values() for v in vals):
                return False  # a carry: forward or backward layers
        return True

    # -- rewriting -----------------------------------------------------------------------
    def _roll(self, graph: Graph, ctx: PassContext, layers: list[list[Op]]) -> str | None:
        rw = ctx.rewriter
        k = len(layers)
        window = [op for layer in layers for op in layer]
        in_window = set(window)
        ref = layers[1]
        pos = {op: t for t, op in enumerate(ref)}
        prev = {op: t for t, op in enumerate(layers[0])}

        # inputs by position (t, slot, i) per layer
        def inputs_of(layer):
            return [v for op in layer for vals in graph.op_inputs(op).values() for v in vals]

        per_layer_inputs = [inputs_of(layer) for layer in layers]
        ref_in = per_layer_inputs[1]
        carries: dict[tuple, Value] = {}  # (t, slot, i) of layer 0's output -> initial value
        ext_positions: list[int] = []
        for n, v in enumerate(ref_in):
            prod = graph.producer(v)
            if prod in prev:  # a carry from the previous layer
                key = (prev[prod], self._out_key(graph, prod, v))
                carries.setdefault(key, per_layer_inputs[0][n])
            elif prod not in pos:
                ext_positions.append(n)
        # outputs: keys (t, (slot, i)) with a use outside the window in some layer
        exported: dict[tuple, set[int]] = defaultdict(set)
        for j, layer in enumerate(layers):
            for t, op in enumerate(layer):
                for slot, vals in graph.op_outputs(op).items():
                    for i, v in enumerate(vals):
                        outside = (v in ctx.keep or graph.is_output(v)
                                   or any(u not in in_window for u in graph.user_ops(v)))
                        if outside:
                            exported[(t, (slot, i))].add(j)

        def value_at(j, key):
            t, (slot, i) = key
            return graph.op_outputs(layers[j][t])[slot][i]

        for n, v in enumerate(ref_in):  # layer 0 reads one initial value per carry
            prod = graph.producer(v)
            if prod in prev and carries[(prev[prod], self._out_key(graph, prod, v))] \
                    is not per_layer_inputs[0][n]:
                return "the first layer reads two values where later layers read one carry"
        carry_keys = list(carries)
        out_keys = [key for key in carry_keys if exported.get(key) == {k - 1}]
        ys_keys = [key for key in exported if key not in out_keys]
        # per-layer and constant inputs, one body input per distinct sequence of values
        groups: dict[tuple, list[int]] = {}
        for n in ext_positions:
            seq = tuple(per_layer_inputs[j][n] for j in range(k))
            groups.setdefault(seq, []).append(n)
        consts = [seq for seq in groups if all(x is seq[0] for x in seq)]
        stacked = [seq for seq in groups if seq not in consts]

        firsts = [ref_in[groups[seq][0]] for seq in (*stacked, *consts)]
        if len(set(firsts)) != len(firsts):
            return "a layer reads one value where other layers read different ones"
        body_text = self._body(graph, layers, carries, carry_keys, stacked, consts, groups,
                               ys_keys, value_at)
        anchor, role = window[0], window[0].role
        stacks = [rw.create_op("stack", {"X": list(seq)}, {"Y": f"{seq[0].var.name}.stack"},
                               {"axis": 0}, after=anchor, role=role).output("Y")
                  for seq in stacked]
        keep_values = {value_at(k - 1, key) for key in out_keys}
        keep_values |= {value_at(j, key) for key in ys_keys for j in range(k)}
        for op in reversed(window):
            outs = op.output_values()
            rw.erase_op(op, erase_outputs=False)
            for v in outs:
                if v not in keep_values:
                    rw.erase_value(v)
        outs_spec = [value_at(k - 1, key) if key in out_keys else
                     f"{value_at(k - 1, key).var.name}.final" for key in carry_keys]
        scan = rw.create_op(
            "scan_layers",
            {"Init": [carries[key] for key in carry_keys], "Xs": stacks,
             "Consts": [seq[0] for seq in consts]},
            {"Out": outs_spec, "Ys": [f"{value_at(0, key).var.name}.stacked"
                                      for key in ys_keys]},
            {"body": body_text, "iterations": k}, after=anchor, role=role)
        for key, ys in zip(ys_keys, scan.outputs.get("Ys", [])):
            rw.create_op("unstack", {"X": ys}, {"Y": [value_at(j, key) for j in range(k)]},
                         {"axis": 0, "num": k}, after=anchor, role=role)
        return None

    def _body(self, graph, layers, carries, carry_keys, stacked, consts, groups, ys_keys,
              value_at) -> str:
        """Layer 1 as a graph of its own, printed as text IR."""
        body = Graph("layer")
        rw = Rewriter(body)
        ref = layers[1]
        mapping: dict[Value, Value] = {}

        def bval(v: Value, kind: str = "temp") -> Value:
            if v not in mapping:  # the body's inputs are fed by each iteration
                info = VarInfo(v.var.name, kind, stop_gradient=kind == "feed")
                mapping[v] = rw.value_of(info, v.version, v.type)
            return mapping[v]

        ref_in = [v for op in ref for vals in graph.op_inputs(op).values() for v in vals]
        inputs = [value_at(0, key) for key in carry_keys]  # layer 1 reads layer 0's outputs
        inputs += [ref_in[groups[seq][0]] for seq in stacked]
        inputs += [ref_in[groups[seq][0]] for seq in consts]
        for v in inputs:
            rw.add_graph_input(bval(v, "feed"))
        for op in ref:
            ins = {s: [bval(v) for v in vs] for s, vs in graph.op_inputs(op).items()}
            outs = {s: [bval(v) for v in vs] for s, vs in graph.op_outputs(op).items()}
            rw.create_op(op.type, ins, outs, dict(op.attrs), role=op.role)
        rw.set_outputs([bval(value_at(1, key)) for key in carry_keys]
                       + [bval(value_at(1, key)) for key in ys_keys])
        return body.to_text()


# -- stack folding -------------------------------------------------------------------------
_MAX_PIECES = 4


def _row_sources(graph: Graph) -> dict[Value, tuple[Value, int]]:
    """value -> (stacked array, row) for every unstack output and every input of a stack
    of graph inputs (those arrays are computable wherever their rows are)."""
    where: dict[Value, tuple[Value, int]] = {}
    for op in graph.ops():
        if op.type == "unstack" and op.attrs["axis"] == 0:
            x = op.input("X")
            for r, v in enumerate(op.outputs.get("Y", [])):
                where.setdefault(v, (x, r))
        elif op.type == "stack" and op.attrs["axis"] == 0:
            xs = op.inputs.get("X", [])
            if all(graph.producer(v) is None for v in xs):
                y = op.output("Y")
                for r, v in enumerate(xs):
                    where.setdefault(v, (y, r))
    return where


def _pieces(rows: list) -> list[tuple]:
    """Maximal runs of consecutive rows of one array: (array, first, last) or (None, v)."""
    pieces: list[list] = []
    for value, src in rows:
        if src is not None and pieces and pieces[-1][0] is src[0]:
            arr, first, last = pieces[-1]
            step = (1 if last > first else -1) if last != first else src[1] - last
            if step in (1, -1) and src[1] - last == step:
                pieces[-1][2] = src[1]
                continue
        pieces.append([src[0], src[1], src[1]] if src is not None else [None, value, None])
    return [tuple(p) for p in pieces]


def fold_stacks(graph: Graph, ctx: PassContext) -> None:
    """Make a stack of rows of one stacked array read that array (slice, reverse, concat),
    and drop unstack ops whose outputs nothing reads any more."""
    rw = ctx.rewriter
    where = _row_sources(graph)
    for op in list(graph.ops()):
        if op.type != "stack" or op.attrs["axis"] != 0:
            continue
        xs, y = op.inputs["X"], op.output("Y")
        # a source array an earlier fold erased (its stack op lost its last reader) is gone
        rows = [(v, src if src is not None and src[0] is not y and graph.has_value(src[0])
                 else None) for v, src in ((v, where.get(v)) for v in xs)]
        pieces = _pieces(rows)
        if len(pieces) > _MAX_PIECES or all(p[0] is None for p in pieces):
            continue
        parts = []
        for arr, a, b in pieces:
            if arr is None:
                parts.append(rw.create_op("unsqueeze2", {"X": a}, {"Out": f"{a.var.name}.row"},
                                          {"axes": [0]}, after=op).output("Out"))
                continue
            lo, hi = min(a, b), max(a, b)
            part = arr
            if (lo, hi + 1) != (0, arr.shape[0]):
                part = rw.create_op("slice", {"Input": arr}, {"Out": f"{y.var.name}.rows"},
                                    {"axes": [0], "starts": [lo], "ends": [hi + 1]},
                                    after=op).output("Out")
            if b < a:
                part = rw.create_op("reverse", {"X": part}, {"Out": f"{y.var.name}.reversed"},
                                    {"axis": [0]}, after=op).output("Out")
            parts.append(part)
        new = parts[0] if len(parts) == 1 else rw.create_op(
            "concat", {"X": parts}, {"Out": f"{y.var.name}.joined"}, {"axis": 0},
            after=op).output("Out")
        if new.type != y.type:
            continue  # an unknown (-1) dimension the pieces do not pin down alike
        rw.replace_all_uses(y, new)
        if not graph.has_users(y) and not graph.is_output(y) and y not in ctx.keep:
            rw.erase_op(op)
        ctx.count("stacks folded")
    for op in list(graph.ops()):
        if op.type == "unstack" and all(not graph.has_users(v) and not graph.is_output(v)
                                        and v not in ctx.keep for v in op.output_values()):
            rw.erase_op(op)
