"""enable-inplace: a liveness-based buffer plan for one step (BuildStrategy.enable_inplace).

Matches each op output against its op definition's in-place candidates (``OpDef.inplace``;
a gradient op of an elementwise op inherits ``Out@GRAD -> X@GRAD``) and lets the output take
the input's buffer when Paddle's reusability rules hold (paddle-passes.md section 6) over
the stable topological order:

- input and output have the same type (dtype and shape), so the buffer fits exactly, and
  neither is row-sparse (rows and values are two buffers whose size only the run knows;
  a sparse value's bytes are predicted as one row and its index per batch element);
- the op is the input's last reader, reads it exactly once, and nothing reads it later;
- the input is not fetched, not a feed (the caller owns feeds), not already given away;
- a temporary never becomes persistable state, and state is reused only by a later version
  of the same variable, and only when the step donates its updated state (``donate_state``),
  as graphc's JAX backend does: that is the ``ParamOut -> Param`` update done in place.
  Without a declared pair, the final version of donated state still takes its input's
  buffer once that is dead (XLA aliases donated arguments to outputs).

Paddle requires the output to be SSA version 0 because its buffers belong to variable
names; graphc's SSA values each own a buffer, so versions need no rule.

XLA assigns buffers itself, so the pass does not change the graph: it stores a
``MemoryPlan`` on ``graph.memory_plan`` (pairs, which value lives in which buffer, predicted
bytes with and without reuse) and reports counts, declines and predicted peak bytes at
``batch_size`` in its statistics. ``plan.predict(batch)`` gives the bytes for any batch
size; every ``-1`` dimension is taken to be the batch. The plan is for the sequential
schedule; ops run concurrently (the interpreter's thread pool) never share buffers.

LoD values (docs/lod.md) are sized by their token bucket, not the batch: their ``-1`` token
dimension counts ``lod_tokens`` rows (0: as many as the batch; the real bucket is chosen per
batch at the feed), reported as ``LoD values (sized at N tokens)``. A LoD output takes its
input's buffer only through a row-wise op (which keeps the input's bucket); LoD values never
enter memory-optimize's pool (two feeds' buckets differ): both are reported as declines.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import ClassVar

from pydantic import Field

from ..ir.grad_defs import GRAD_SUFFIX, forward_type
from ..ir.graph import Graph, Value, gc_paused
from ..ir.opdef import CONTROL_SLOT, ELEMENTWISE, get_op_def
from ..ir.types import ROWS_DTYPE, TensorType
from .infra.base import Pass, PassContext, register_pass

_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1,
             "int16": 2, "int32": 4, "int64": 8, "bool": 1}


def inplace_candidates(op_type: str) -> dict[str, str]:
    """Output slot -> input slot whose buffer the output may take, from the op definition.

    A gradient op without its own declaration inherits its elementwise forward op's pairs
    reversed through the gradients (``Out -> X`` gives ``X@GRAD <- Out@GRAD``), as Paddle
    declares for elementwise and activation grads.
    """
    opdef = get_op_def(op_type)
    if opdef.inplace:
        return opdef.inplace
    fwd = forward_type(op_type)
    if fwd is not None:
        fdef = get_op_def(fwd)
        if fdef.has_trait(ELEMENTWISE):
            return {i + GRAD_SUFFIX: o + GRAD_SUFFIX for o, i in fdef.inplace.items()}
    return {}


def symbolic_bytes(value: Value) -> tuple[int, int, int]:
    """(bytes of the known dims, number of batch dims, number of token dims): bytes =
    first * batch ** second * tokens ** third (a LoD value's dim 0 counts tokens)."""
    return _type_bytes(value.type)


@functools.lru_cache(maxsize=4096)
def _type_bytes(type: TensorType) -> tuple[int, int, int]:
    size, unknown = _ITEMSIZE.get(type.dtype, 4), 0
    if type.sparse:
        # values [n, *shape[1:]] and n int32 row indices; n (one row per id) is taken to
        # grow with the batch like any other -1 dimension
        return size * math.prod(type.shape[1:]) + _ITEMSIZE[ROWS_DTYPE], 1, 0
    shape = type.shape
    tokens = 0
    if type.lod_level and shape:  # the packed tokens: the bucket, not the batch
        tokens, shape = 1, shape[1:]
    for d in shape:
        if d < 0:
            unknown += 1
        else:
            size *= d
    return size, unknown, tokens


# -- the plan ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Reuse:
    """``output`` takes the buffer ``input`` held (value names), at op ``op`` (its type;
    ``where`` adds the source line).

    ``kind``: ``inplace`` (a temporary, by the op's in-place pair), ``donated`` (a new
    version of donated state), ``pool`` (a dead buffer of the same size, memory-optimize).
    """

    output: str
    input: str
    kind: str
    op: str
    where: str
    slots: str = ""  # "X -> Out" for a declared pair


@dataclass(frozen=True)
class MemoryPrediction:
    """Predicted bytes of one step at ``batch_size``, in XLA's categories.

    ``arguments``: inputs the step reads (state and feeds); ``outputs``: updated and created
    state and fetches; ``donated``: argument bytes the outputs reuse (XLA's alias bytes);
    ``temp_peak``: most bytes of temporaries live at once; ``peak``: most bytes live at once
    in all; ``total`` = arguments + outputs - donated + temp_peak, comparable to XLA's
    temp + argument + output - alias. ``buffers`` and ``allocated``: how many distinct
    buffers the step uses and their bytes summed (what an allocator that never frees would
    need: reuse across ops lowers it even where eager freeing already keeps the peak).
    """

    batch_size: int
    arguments: int
    outputs: int
    donated: int
    temp_peak: int
    peak: int
    buffers: int
    allocated: int

    @property
    def total(self) -> int:
        return self.arguments + self.outputs - self.donated + self.temp_peak


@dataclass
class _Buffer:
    """One buffer: the values it holds one after another, as live segments [start, end] of
    op positions (-1: before the first op; the op count: returned by the step)."""

    size: tuple[int, int, int]
    segments: list[list[int]]
    holder: Value  # the value in it now
    holder_end: int  # where the holder dies
    output: bool = False  # holds a step output at the end

    @property
    def start(self) -> int:
        return self.segments[0][0]

    def hold(self, v: Value, start: int, end: int) -> None:
        self.holder, self.holder_end = v, end
        last = self.segments[-1]
        if start <= last[1]:  # in place: the output is born where its input dies
            last[1] = max(last[1], end)
        else:  # a dead buffer taken again: nothing lives in it in between
            self.segments.append([start, end])


@dataclass
class _Schedule:
    """Buffers with live intervals over op positions, and the step's argument/output sets."""

    buffers: list[_Buffer]
    arguments: list[tuple[int, int, int]]
    outputs: list[tuple[int, int, int]]
    donated: list[tuple[int, int, int]]
    num_ops: int

    def predict(self, batch: int, tokens: int = 0) -> MemoryPrediction:
        tokens = tokens or batch

        def nbytes(size: tuple[int, int, int]) -> int:
            return size[0] * batch ** size[1] * tokens ** size[2]

        n = self.num_ops
        live = [0] * (n + 3)
        temp = [0] * (n + 3)
        for b in self.buffers:
            nb = nbytes(b.size)
            is_temp = b.start >= 0 and not b.output
            for start, end in b.segments:
                s, e = start + 1, end + 1  # shifted so that arguments sit at 0
                live[s] += nb
                live[e + 1] -= nb
                if is_temp:
                    temp[s] += nb
                    temp[e + 1] -= nb
        peak = temp_peak = cur = cur_t = 0
        for i in range(n + 2):
            cur += live[i]
            cur_t += temp[i]
            peak, temp_peak = max(peak, cur), max(temp_peak, cur_t)
        return MemoryPrediction(batch, sum(map(nbytes, self.arguments)),
                                sum(map(nbytes, self.outputs)),
                                sum(map(nbytes, self.donated)), temp_peak, peak,
                                len(self.buffers), sum(nbytes(b.size) for b in self.buffers))


@dataclass
class MemoryPlan:
    """Which buffer each value of one step lives in, and the bytes that predicts.

    ``buffer_of`` maps value names to buffer ids; values sharing an id share a buffer, one
    after the other. ``with_reuse``/``without_reuse`` are the predictions at ``batch_size``
    (without reuse: every value its own buffer, dead ones still freed, nothing donated).
    ``graph_version`` tells whether the graph changed since the plan was made.
    """

    pass_name: str
    pool: bool  # whether dead buffers were reused across ops (memory-optimize)
    graph_version: int
    batch_size: int
    reuse: list[Reuse]
    buffer_of: dict[str, int]
    declined: dict[str, int]
    lod_values: int  # LoD values planned (sized at ``lod_tokens`` tokens)
    lod_tokens: int
    with_reuse: MemoryPrediction
    without_reuse: MemoryPrediction
    _schedule: _Schedule = field(repr=False)
    _baseline: _Schedule = field(repr=False)

    @property
    def peak_bytes(self) -> int:
        return self.with_reuse.peak

    @property
    def peak_bytes_without_reuse(self) -> int:
        return self.without_reuse.peak

    def predict(self, batch_size: int, reuse: bool = True, tokens: int = 0) -> MemoryPrediction:
        """Bytes at another batch size (every -1 dimension is the batch; a LoD value's token
        dimension is ``tokens``, 0: the batch)."""
        return (self._schedule if reuse else self._baseline).predict(batch_size, tokens)

    def is_current(self, graph: Graph) -> bool:
        return getattr(graph, "memory_plan", None) is self and graph.revision == \
            self.graph_version

    def count(self, kind: str) -> int:
        return sum(r.kind == kind for r in self.reuse)

    def to_text(self) -> str:
        """The plan as ``//`` comment lines (the IR parser skips them)."""
        lines = [f"// memory plan ({self.pass_name}, stable topological order): "
                 f"{len(self.reuse)} reuses"]
        width = max([len(r.output) for r in self.reuse] + [0]) + 1
        for r in self.reuse:
            slots = f" ({r.slots})" if r.slots else ""
            lines.append(f"//   %{r.output:<{width}} <- %{r.input}  {r.kind} by {r.op}{slots}")
        for reason, n in self.declined.items():
            lines.append(f"//   declined {n}: {reason}")
        for label, p in (("with reuse", self.with_reuse), ("without reuse", self.without_reuse)):
            lines.append(f"// {label:<13} (batch {p.batch_size}): peak {p.peak} B; arguments "
                         f"{p.arguments}, outputs {p.outputs}, donated {p.donated}, "
                         f"temporaries {p.temp_peak}, total {p.total}; {p.buffers} buffers, "
                         f"{p.allocated} B allocated")
        return "\n".join(lines) + "\n"

    def __str__(self) -> str:
        return self.to_text()


# -- planning -----------------------------------------------------------------------------

@gc_paused  # it allocates a few objects per value, none of them garbage
def plan_memory(graph: Graph, keep=(), batch_size: int = 1, donate_state: bool = True,
                pool: bool = False, pass_name: str = "enable-inplace",
                lod_tokens: int = 0) -> MemoryPlan:
    """Plan buffers for ``graph`` with ``keep`` (fetched values) live to the end."""
    order = graph.ops()
    n = len(order)
    keep = set(keep)
    outputs = set(graph.outputs)
    final = {v.var.name: v for v in graph.outputs}

    # liveness: the last position that reads each value's data (control uses need no data)
    last_use: dict[Value, int] = {}
    for t, op in enumerate(order):
        for slot, vals in graph.op_inputs(op).items():
            if slot != CONTROL_SLOT:
                for v in vals:
                    last_use[v] = t

    state_inputs = [v for v in graph.inputs if v.var.kind != "feed"]
    updated = {v for v in state_inputs if final.get(v.var.name, v) is not v}
    updated_by_var = {v.var.name: v for v in updated}
    arguments = [v for v in graph.inputs if v in updated or graph.has_users(v) or v in keep]
    state_vars = {v.var.name for v in state_inputs}
    step_outputs = list(dict.fromkeys(
        [final[v.var.name] for v in state_inputs if v in updated]
        + [v for v in graph.outputs if v.var.name not in state_vars]
        + sorted(keep, key=lambda v: v.name)))
    live_to_end = set(step_outputs) | outputs | keep

    def end_of(v: Value, t: int) -> int:
        if v in live_to_end:
            return n
        return last_use.get(v, t)

    def schedule(reuse_on: bool, declined: dict[str, int] | None, reuse: list[Reuse] | None,
                 buffer_of: dict[str, int] | None) -> _Schedule:
        buffers: list[_Buffer] = []
        buf: dict[Value, int] = {}
        donated_now = donate_state and reuse_on
        pooling = pool and reuse_on

        def new(v: Value, start: int, end: int) -> None:
            buf[v] = len(buffers)
            buffers.append(_Buffer(symbolic_bytes(v), [[start, end]], v, end))

        def take(v: Value, b: int, t: int) -> None:
            buf[v] = b
            buffers[b].hold(v, t, end_of(v, t))

        for v in arguments:
            # argument buffers exist for the whole call (XLA never frees them early); donated
            # ones can take their variable's new version once the old one is dead
            new(v, -1, n)
            buffers[-1].holder_end = (last_use.get(v, -1) if v in updated and v not in keep
                                      else n)
        free: dict[tuple, list[int]] = {}  # pool: (size, dtype) -> dead temporary buffers
        pooled: set[int] = set()

        def decline(reason: str) -> None:
            if declined is not None:
                declined[reason] = declined.get(reason, 0) + 1

        for t, op in enumerate(order):
            ins = graph.op_inputs(op)
            data_in = [v for s, vs in ins.items() if s != CONTROL_SLOT for v in vs]
            reads = Counter(data_in)  # once per op: ops such as fused optimizers read 1000s
            pairs = inplace_candidates(op.type) if reuse_on else {}
            outs = graph.op_outputs(op)
            for out_slot, vals in outs.items():
                for pos, o in enumerate(vals):
                    taken = None
                    in_slot = pairs.get(out_slot)
                    if in_slot is not None:
                        why = None
                        candidates = ins.get(in_slot, [])
                        if len(candidates) == len(vals) > 1:  # list slots pair by position
                            candidates = [candidates[pos]]
                        for i in candidates:
                            why = _reusable(i, o, t, reads, buf, buffers, keep,
                                            donated_now, op.type)
                            if why is None:
                                taken = (i, "donated" if i.var.persistable else "inplace",
                                         f"{in_slot} -> {out_slot}")
                                break
                        if taken is None and why is not None:
                            decline(why)
                    if taken is None and donated_now and o.var.persistable:
                        taken = _donated_fallback(o, t, final, buf, buffers, updated_by_var)
                    if taken is None and pooling and o.type.lod_level:
                        decline(_LOD_POOL)
                    elif taken is None and pooling and not o.var.persistable \
                            and not o.type.sparse:
                        stack = free.get(symbolic_bytes(o) + (o.dtype,))
                        if stack:
                            b = stack.pop()
                            pooled.discard(b)
                            taken = (buffers[b].holder, "pool", "")
                    if taken is None:
                        new(o, t, end_of(o, t))
                        continue
                    i, kind, slots = taken
                    if reuse is not None:
                        reuse.append(Reuse(o.name, i.name, kind, op.type, op.where, slots))
                    take(o, buf[i], t)
            if pooling:  # temporaries that died here go back to the pool, latest on top
                for v in data_in + [o for vs in outs.values() for o in vs]:
                    b = buf.get(v)
                    if b is None or buffers[b].holder is not v or buffers[b].start < 0 \
                            or v.type.sparse or v.type.lod_level:
                        continue
                    if buffers[b].holder_end == t and v not in live_to_end and b not in pooled:
                        free.setdefault(buffers[b].size + (v.dtype,), []).append(b)
                        pooled.add(b)
        for b in buffers:
            b.output = b.holder in live_to_end
        if buffer_of is not None:
            buffer_of.update((v.name, b) for v, b in buf.items())
        donated = [symbolic_bytes(v) for v in arguments
                   if v in updated and buffers[buf[v]].holder is final[v.var.name]]
        return _Schedule(buffers, [symbolic_bytes(v) for v in arguments],
                         [symbolic_bytes(v) for v in step_outputs], donated, n)

    declined: dict[str, int] = {}
    reuse: list[Reuse] = []
    buffer_of: dict[str, int] = {}
    with_reuse = schedule(True, declined, reuse, buffer_of)
    baseline = schedule(False, None, None, None)
    lod_values = sum(1 for v in graph.values.values() if v.type.lod_level)
    return MemoryPlan(pass_name, pool, graph.revision, batch_size, reuse, buffer_of,
                      dict(sorted(declined.items(), key=lambda kv: (-kv[1], kv[0]))),
                      lod_values, lod_tokens or batch_size,
                      with_reuse.predict(batch_size, lod_tokens),
                      baseline.predict(batch_size, lod_tokens), with_reuse, baseline)


_LOD_POOL = "LoD value: not pooled (each feed's token bucket is chosen per batch)"


def _reusable(i: Value, o: Value, t: int, reads: Counter, buf: dict,
              buffers: list[_Buffer], keep: set, donated_now: bool,
              op_type: str = "") -> str | None:
    """None when ``o`` may take ``i``'s buffer at position ``t``, else why not."""
    if i.type.sparse or o.type.sparse:
        return "row-sparse value (rows and values: two buffers, sized only when run)"
    if i.type != o.type:
        return "input and output types differ"
    if i.type.lod_level and get_op_def(op_type).lod != "rowwise":
        return ("LoD value through an op that is not row-wise (its output need not keep the "
                "input's token bucket)")
    if reads[i] != 1:
        return "the op reads the input more than once"
    if i in keep:
        return "input is fetched"
    if i.var.kind == "feed":
        return "input is a feed (the caller owns it)"
    if i.var.persistable:
        if not donated_now:
            return "input is persistable state (not donated)"
        if o.var is not i.var:
            return "input is persistable state of another variable"
    elif o.var.persistable:
        return "output is persistable state"
    b = buf.get(i)
    if b is None or buffers[b].holder is not i:
        return "input's buffer is already reused"
    if buffers[b].holder_end != t:
        return "input is read after the op"
    return None


def _donated_fallback(o: Value, t: int, final: dict, buf: dict, buffers: list[_Buffer],
                      updated_by_var: dict):
    """The final version of donated state takes its variable's buffer once that is dead."""
    if final.get(o.var.name) is not o:
        return None
    source = updated_by_var.get(o.var.name)
    if source is None:
        return None
    b = buffers[buf[source]]
    if b.holder.var is not o.var or b.holder_end > t:
        return None  # already given away, or still read after this op: XLA copies
    return (b.holder, "donated", "")


@register_pass
class EnableInplace(Pass):
    """Plan which outputs reuse an input's buffer in place; report predicted peak bytes."""

    name = "enable-inplace"
    regions = "decline"
    regions_reason = ("XLA assigns a body's buffers inside its loop and a plan is no part of a "
                      "body's text; the plan covers the outer graph, where a region op is one op")
    reuse_pool: ClassVar[bool] = False  # memory-optimize also reuses dead buffers across ops
    batch_size: int = Field(1, gt=0)  # the batch the statistics' byte counts are for
    donate_state: bool = True  # the runtime donates updated state (graphc's JAX backend)
    lod_tokens: int = Field(0, ge=0)  # LoD values' token bucket in the statistics (0: batch)

    def run(self, graph: Graph, ctx: PassContext) -> None:
        plan = plan_memory(graph, ctx.keep, self.batch_size, self.donate_state,
                           self.reuse_pool, self.name, self.lod_tokens)
        graph.memory_plan = plan
        report(plan, ctx)


def report(plan: MemoryPlan, ctx: PassContext) -> None:
    """The plan's counts, declines and predicted peaks as pass statistics."""
    ctx.count("in-place pairs", plan.count("inplace"))
    ctx.count("donated state reused", plan.count("donated"))
    if plan.pool:
        ctx.count("pool reuses", plan.count("pool"))
    for reason, n in plan.declined.items():
        ctx.decline(reason, n)
    if plan.lod_values:
        ctx.count(f"LoD values (sized at {plan.lod_tokens} tokens)", plan.lod_values)
    b = plan.batch_size
    ctx.count(f"predicted peak bytes (batch {b})", plan.with_reuse.peak)
    ctx.count(f"predicted peak bytes without reuse (batch {b})", plan.without_reuse.peak)
    ctx.count("buffers", plan.with_reuse.buffers)
    ctx.count("buffers without reuse", plan.without_reuse.buffers)
