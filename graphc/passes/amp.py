"""amp: automatic mixed precision on a training graph (BuildStrategy.amp): casts by op lists,
fp32 master weights, and static or dynamic loss scaling that skips non-finite steps.

The pass runs on the whole lowered program (forward, backward and optimizer ops together,
as ``minimize`` left them), so forward and backward get their casts in one sweep.

**Casts.** Ops are classified by type; a grad op ``T_grad`` is classified as ``T``:

- white (``WHITE_LIST`` + ``custom_white_list``: mul, matmul, conv2d, depthwise_conv2d) run
  in ``dtype`` (bfloat16 or float16);
- black (``BLACK_LIST`` + ``custom_black_list`` + every op with the loss trait: losses,
  softmax, mean and reduce ops, sum, exp/sqrt/square/pow, layer_norm) stay float32;
- gray (every other op) follow their inputs: low precision when a float input is already
  low precision (a cast back from ``dtype``), else float32.

An op moved to low precision reads each float32 input through a cast to ``dtype`` and writes
new low-precision values, each cast back into the op's original float32 value, so names,
fetches and graph outputs never change. A cast is made once per (value, dtype), and a cast
to ``dtype`` of a value that is itself a cast from ``dtype`` is the original value (exact),
so chains of low-precision ops pass low values directly; casts nobody reads are removed at
the end. Narrowing-then-widening pairs (f32 -> bf16 -> f32) are lossy and never cancelled.
batch_norm (and its grad) run on low-precision X/Y but keep Scale, Bias, Mean, Variance and
the saved statistics in float32 (``FLOAT32_SLOTS``). Optimizer, collective, initializer and
other stateful ops are never touched, nor are region ops (loops, branches: they and their
bodies stay float32), so parameters (master weights) and optimizer state
stay float32 and optimizers update float32 parameters from float32 gradients. Ops with a
float operand that is neither float32 nor ``dtype`` (float64 programs) are left alone.

**Loss scaling** (training graphs: a backward ``fill_constant`` loss-gradient seed and
optimizer ops). The seed is multiplied by the persistable ``loss_scaling`` (float32 [1]).
``check_finite_and_unscale`` reads the gradients as backward finished them (before
regularisation), writes the unscaled gradients as new versions of the same variables (so
fetching ``w@GRAD`` gives the unscaled one, and a data-parallel pass that all-reduces the
gradient where backward finishes it does so before this check, so every replica decides
alike) and the flag ``found_infinite`` (bool [1]). With ``use_dynamic_loss_scaling``,
``update_loss_scaling`` then updates ``loss_scaling`` and the persistable counters
``num_good_steps`` / ``num_bad_steps`` (int32 [1]) by Paddle's schedule: a finite step counts
good and resets bad; after ``incr_every_n_steps`` good ones the scale grows by ``incr_ratio``
(unless that overflows); a non-finite step counts bad and resets good; after
``decr_every_n_nan_or_inf`` consecutive bad ones the scale shrinks by ``decr_ratio`` (never
below 1); the counter that fired restarts from 0. Static scaling keeps the scale and skips
non-finite steps all the same.

**Skipping a non-finite step.** Every persistable variable the step writes (parameters,
optimizer accumulators and beta powers, batch_norm running statistics, LR counters) except the
AMP state gets its final version through ``skip_update(Skip=found_infinite, Old=<value read
at the start of the step>, New=<updated value>)``: on a non-finite step the scope receives
exactly the old arrays (bit-identical), and only the scale and counters move.

**State initialisation.** The three state variables are new graph inputs (made with
``Rewriter.new_state``) whose VarInfo records ``extra["initial_value"]`` (init_loss_scaling,
0, 0). A scope must hold them before the first run: ``graphc.amp.init_state(startup, configs)``
appends their fill_constant initialisers to the startup program (Paddle's way), and a runtime
may fill absent state from ``initial_value``. A graph that already declares them as inputs
of the right type (e.g. kept from a program) reuses them.

**Fetchable by name:** ``loss_scaling`` (the scale after this step's update),
``num_good_steps``, ``num_bad_steps``, and ``found_infinite`` (true: this step was skipped).

Declines, with a ``skipped:`` statistic: ops with float64 (or other-precision) operands; ops
that would go low but read or write a row-sparse value (``lookup_table_grad`` of an
``is_sparse`` embedding: kept float32; sparse gradients are unscaled all the same); ops
whose shape inference refuses the low-precision types; loss scaling on graphs without
optimizer ops or without a loss-gradient seed; state created by the step (nothing to keep).
"""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator

from ..ir.errors import ShapeError
from ..ir.grad_defs import GRAD_SUFFIX, forward_type
from ..ir.graph import Graph, Op, Value
from ..ir.opdef import (
    COLLECTIVE,
    CONTROL_SLOT,
    HOST_CALLBACK,
    INITIALIZER,
    LOSS,
    OPTIMIZER,
    STATEFUL,
    get_op_def,
    has_op_def,
)
from ..ir.types import FLOAT_DTYPES, TensorType, short_dtype
from ..ops.amp.defs import BAD_STEPS, FOUND_INFINITE, GOOD_STEPS, LOSS_SCALING, STATE_TYPES
from .infra.base import Pass, PassContext, PassError, register_pass

WHITE_LIST = frozenset({"mul", "matmul", "conv2d", "depthwise_conv2d"})
BLACK_LIST = frozenset({
    "softmax", "softmax_with_cross_entropy", "cross_entropy", "mean", "reduce_sum",
    "reduce_mean", "reduce_max", "sum", "exp", "sqrt", "square", "elementwise_pow",
    "layer_norm",
    # Paddle 1.8's fp16 black list adds these (log, cos_sim, the sigmoid loss); the other
    # losses, norms and products overflow or lose precision in half precision alike
    "log", "pow", "cos_sim", "sigmoid_cross_entropy_with_logits", "log_loss", "huber_loss",
    "smooth_l1_loss", "bpr_loss", "margin_rank_loss", "rank_loss", "kldiv_loss",
    "reduce_prod", "reduce_min", "norm", "clip_by_norm",
})
# Slots that stay float32 when their op runs in low precision (normalisation statistics).
_BN_STATS = frozenset({"Scale", "Bias", "Mean", "Variance", "SavedMean", "SavedVariance",
                       "MeanOut", "VarianceOut"})
FLOAT32_SLOTS = {"batch_norm": _BN_STATS}
_AMP_OPS = frozenset({"cast", "check_finite_and_unscale", "update_loss_scaling", "skip_update"})
# host callbacks too: py_func's outputs have the dtypes its user declared, and a Python
# function (or Print) should see the float32 values the program would have without AMP
_UNTOUCHED_TRAITS = frozenset({OPTIMIZER, COLLECTIVE, INITIALIZER, STATEFUL, HOST_CALLBACK})
_FP32 = "float32"


def _float(v: Value) -> bool:
    return v.dtype in FLOAT_DTYPES


@register_pass
class Amp(Pass):
    """Mixed precision: casts by white/black/gray op lists, fp32 master weights, loss scaling."""

    name = "amp"
    regions = "decline"
    regions_reason = ("bodies stay float32: a region op is kept float32 like a black op (a "
                      "body's graph inputs and the op's operands would have to change type "
                      "together), and loss scaling belongs to the outer graph")
    dtype: Literal["bfloat16", "float16"] = "bfloat16"
    custom_white_list: list[str] = []
    custom_black_list: list[str] = []
    init_loss_scaling: float = 32768.0
    use_dynamic_loss_scaling: bool = True
    incr_every_n_steps: int = 1000
    decr_every_n_nan_or_inf: int = 2
    incr_ratio: float = 2.0
    decr_ratio: float = 0.8

    @field_validator("custom_white_list", "custom_black_list")
    @classmethod
    def _known_ops(cls, value: list[str]) -> list[str]:
        unknown = [t for t in value if not has_op_def(t)]
        if unknown:
            raise ValueError(f"unknown op types {unknown}")
        return value

    @field_validator("init_loss_scaling")
    @classmethod
    def _positive(cls, value: float) -> float:
        if not value > 0:
            raise ValueError(f"must be > 0, got {value}")
        return value

    def run(self, graph: Graph, ctx: PassContext) -> None:
        both = set(self.custom_white_list) & set(self.custom_black_list)
        if both:
            raise PassError(f"pass 'amp': ops {sorted(both)} are in both custom lists")
        _Casting(self, graph, ctx).run()
        _LossScaling(self, graph, ctx).run()

    def kind_of(self, op_type: str) -> str:
        """'white', 'black' or 'gray' for an op type (a grad op as its forward op)."""
        base = forward_type(op_type) or op_type
        if base in self.custom_black_list:
            return "black"
        if base in self.custom_white_list:
            return "white"
        if base in WHITE_LIST:
            return "white"
        if base in BLACK_LIST or (has_op_def(base) and get_op_def(base).has_trait(LOSS)):
            return "black"  # every loss, also those added after this list was written
        if has_op_def(base) and get_op_def(base).regions:
            # -- issue 26: an op holding regions (a branch, a loop body) reads the types its
            # bodies were built with: float32 in, float32 out (this pass does not enter them)
            return "black"
        return "gray"


class _Casting:
    """The cast-placement sweep over ops in topological order."""

    def __init__(self, amp: Amp, graph: Graph, ctx: PassContext):
        self.amp, self.graph, self.ctx = amp, graph, ctx
        self.low = amp.dtype
        self.rw = ctx.rewriter
        self.casts: dict[tuple[Value, str], Value] = {}
        self.made: list[Op] = []  # casts this pass created (removed at the end if unread)
        for op in graph.ops():  # casts already in the graph count: one per (value, dtype)
            if op.type == "cast" and CONTROL_SLOT not in op.inputs:
                self.casts.setdefault((op.input("X"), op.attrs["out_dtype"]), op.output("Out"))

    def run(self) -> None:
        for op in list(self.graph.ops()):
            if self._eligible(op) and self._wants_low(op):
                if any(v.type.sparse for v in op.input_values() + op.output_values()):
                    # casts and the low-precision rules take dense tensors; the op is left in
                    # float32, reading the float32 values its neighbours' casts provide
                    self.ctx.decline(f"{op.type}: row-sparse operand (kept float32)")
                    continue
                self._to_low(op)
        self._remove_unread_casts()

    # -- decisions -------------------------------------------------------------------
    def _eligible(self, op: Op) -> bool:
        opdef = get_op_def(op.type)
        if op.type in _AMP_OPS or opdef.regions:  # a region op stays float32 (regions_reason)
            return False
        traits = opdef.traits
        fwd = forward_type(op.type)
        if fwd is not None:
            traits = traits | get_op_def(fwd).traits
        if traits & _UNTOUCHED_TRAITS and (fwd or op.type) not in FLOAT32_SLOTS:
            return False
        values = [v for s, vs in op.inputs.items() if s != CONTROL_SLOT for v in vs]
        values += op.output_values()
        odd = {v.dtype for v in values if _float(v) and v.dtype not in (_FP32, self.low)}
        if odd:
            self.ctx.decline(f"{op.type}: {'/'.join(sorted(odd))} operands")
            return False
        return any(_float(v) for v in values)

    def _fp32_slots(self, op: Op) -> frozenset:
        base = forward_type(op.type) or op.type
        slots = FLOAT32_SLOTS.get(base, frozenset())
        return slots | {s + GRAD_SUFFIX for s in slots}

    def _castable(self, op: Op, slot: str, v: Value) -> bool:
        return slot != CONTROL_SLOT and slot not in self._fp32_slots(op) and _float(v)

    def _is_low(self, v: Value) -> bool:
        """Low precision already, or float32 widened from low precision (exactly)."""
        if v.dtype == self.low:
            return True
        p = self.graph.producer(v)
        return (p is not None and p.type == "cast" and v.dtype == _FP32
                and p.attrs["in_dtype"] == self.low)

    def _wants_low(self, op: Op) -> bool:
        kind = self.amp.kind_of(op.type)
        if kind == "black":
            return False
        castable = [v for s, vs in op.inputs.items() for v in vs if self._castable(op, s, v)]
        if not castable:
            return False
        if kind == "white":
            return True
        return any(self._is_low(v) for v in castable)

    # -- rewriting -------------------------------------------------------------------
    def _to_low(self, op: Op) -> None:
        rw, low = self.rw, self.low
        ins = op.inputs
        types = {s: [TensorType(v.shape, low) if self._castable(op, s, v) else v.type
                     for v in vs] for s, vs in ins.items() if s != CONTROL_SLOT}
        opdef = get_op_def(op.type)
        try:  # check before touching anything, so a refusal leaves the graph as it was
            inferred = opdef.infer_types(types, op.attrs, op.where)
        except ShapeError:
            self.ctx.decline(f"{op.type}: does not accept {low} operands")
            return
        spec: dict[str, list] = {}  # output slot -> original values or new-value name hints
        widen: list[tuple[str, int, Value]] = []  # (slot, position, original float32 value)
        for slot, vals in op.outputs.items():
            spec[slot] = []
            for pos, (v, t) in enumerate(zip(vals, inferred.get(slot, []))):
                if t.dtype == v.dtype:
                    spec[slot].append(v)
                elif t.dtype == low and v.dtype == _FP32:
                    spec[slot].append(f"{_stem(v)}.{short_dtype(low)}")
                    widen.append((slot, pos, v))
                else:
                    self.ctx.decline(f"{op.type}: output {slot} would become {t.dtype}")
                    return
        new_ins = {s: [self._as(v, low, op) if self._castable(op, s, v) else v for v in vs]
                   for s, vs in ins.items()}
        rw.erase_op(op, erase_outputs=False)
        new = rw.create_op(op.type, new_ins, spec, op.attrs, derived_from=[op])
        new_outs = new.outputs
        for slot, pos, original in widen:
            self._cast_into(new_outs[slot][pos], original, new)
        self.ctx.count(f"{low} ops")

    def _as(self, v: Value, dtype: str, user: Op) -> Value:
        """``v`` as ``dtype``: itself, the value it was widened from, or one shared cast."""
        if v.dtype == dtype:
            return v
        p = self.graph.producer(v)
        if p is not None and p.type == "cast" and p.attrs["in_dtype"] == dtype \
                and v.dtype == _FP32:
            self.ctx.count("casts cancelled")
            return p.input("X")
        key = (v, dtype)
        if key not in self.casts:
            name = f"{_stem(v)}.cast_{short_dtype(dtype)}"
            cast = self.rw.create_op("cast", {"X": v}, {"Out": name},
                                     {"in_dtype": v.dtype, "out_dtype": dtype}, after=user)
            self.made.append(cast)
            self.casts[key] = cast.output("Out")
        return self.casts[key]

    def _cast_into(self, low: Value, original: Value, after: Op) -> None:
        cast = self.rw.create_op("cast", {"X": low}, {"Out": original},
                                 {"in_dtype": low.dtype, "out_dtype": original.dtype},
                                 after=after)
        self.made.append(cast)
        self.casts.setdefault((low, original.dtype), original)

    def _remove_unread_casts(self) -> None:
        graph, keep, kept = self.graph, self.ctx.keep, 0
        for cast in reversed(self.made):  # users before producers: chains go in one sweep
            out = cast.output("Out")
            if graph.has_users(out) or out in keep or graph.is_output(out):
                kept += 1
            else:
                self.rw.erase_op(cast)
        if kept:
            self.ctx.count("casts", kept)


def _stem(v: Value) -> str:
    """A name to derive new values' names from (no ``#``: that marks versions)."""
    return v.var.name + (f".v{v.version}" if v.version else "")


class _LossScaling:
    """Scale the loss gradient, unscale and check the gradients, guard the state updates."""

    def __init__(self, amp: Amp, graph: Graph, ctx: PassContext):
        self.amp, self.graph, self.ctx, self.rw = amp, graph, ctx, ctx.rewriter

    def run(self) -> None:
        graph = self.graph
        optimizers = [op for op in graph.ops() if get_op_def(op.type).has_trait(OPTIMIZER)]
        if not optimizers:
            self.ctx.decline("loss scaling: no optimizer ops")
            return
        seeds = [op for op in graph.ops() if op.type == "fill_constant"
                 and op.role == "backward" and not op.inputs
                 and op.output("Out").var.name.endswith(GRAD_SUFFIX)
                 and op.output("Out").dtype in FLOAT_DTYPES]
        if not seeds:
            self.ctx.decline("loss scaling: no loss-gradient seed")
            return
        grads = self._backward_gradients(optimizers)
        if not grads:
            self.ctx.decline("loss scaling: no gradient computed by backward")
            return
        if FOUND_INFINITE in graph.vars:
            raise PassError(f"pass 'amp': the graph already has a variable '{FOUND_INFINITE}'")
        scale = self._state(LOSS_SCALING, self.amp.init_loss_scaling)
        for seed in seeds:
            self._scale_seed(seed, scale)
        found = self._unscale(grads, scale)
        self._guard_state(found)
        if self.amp.use_dynamic_loss_scaling:
            self._update_scale(found, scale)

    def _state(self, name: str, initial: float) -> Value:
        graph, want = self.graph, STATE_TYPES[name]
        if name not in graph.vars:
            return self.rw.new_state(name, want, initial)
        v = graph.latest(name)
        if v.version != 0 or v not in graph.inputs or v.type != want:
            raise PassError(f"pass 'amp': the graph has a variable '{name}' that is not an "
                            f"unwritten {want} input, so it cannot hold the AMP state")
        return v

    def _backward_gradients(self, optimizers: list[Op]) -> list[Value]:
        """Each optimizer's Grad as backward finished it: back over the optimize-role ops
        that rewrite the same variable (L2 decay: w@GRAD = w@GRAD + c * w)."""
        found: dict[Value, None] = {}
        for op in optimizers:
            for g in op.inputs["Grad"]:
                while (p := self.graph.producer(g)) is not None and p.role == "optimize":
                    same = [x for x in p.input_values() if x.var is g.var]
                    if not same:
                        break
                    g = same[0]
                p = self.graph.producer(g)
                if p is None or p.role == "optimize":
                    self.ctx.decline(f"gradient {g.name}: not computed by backward")
                    continue
                found[g] = None
        order = {op: i for i, op in enumerate(self.graph.ops())}
        return sorted(found, key=lambda g: order[self.graph.producer(g)])

    def _scale_seed(self, seed: Op, scale: Value) -> None:
        rw, out = self.rw, seed.output("Out")
        factor = scale if out.dtype == scale.dtype else rw.create_op(
            "cast", {"X": scale}, {"Out": f"{LOSS_SCALING}.cast_{short_dtype(out.dtype)}"},
            {"in_dtype": scale.dtype, "out_dtype": out.dtype}, after=seed).output("Out")
        scaled = rw.new_version(out)
        mul = rw.create_op("elementwise_mul", {"X": out, "Y": factor}, {"Out": scaled},
                           after=seed)
        rw.replace_all_uses(out, scaled, except_ops=[mul])
        self.ctx.count("loss gradients scaled")

    def _unscale(self, grads: list[Value], scale: Value) -> Value:
        rw = self.rw
        outs = [rw.new_version(g) for g in grads]
        check = rw.create_op("check_finite_and_unscale", {"X": grads, "Scale": scale},
                             {"Out": outs, "FoundInfinite": FOUND_INFINITE},
                             role="optimize", after=self.graph.producer(grads[-1]))
        for g, out in zip(grads, outs):
            rw.replace_all_uses(g, out, except_ops=[check])
        self.ctx.count("gradients unscaled", len(grads))
        return check.output("FoundInfinite")

    def _guard_state(self, found: Value) -> None:
        graph, rw = self.graph, self.rw
        start = {v.var.name: v for v in graph.inputs}
        outputs = list(graph.outputs)
        for i, v in enumerate(outputs):
            old = start.get(v.var.name)
            if old is v or v.var.name in STATE_TYPES:
                continue
            if old is None:
                self.ctx.decline(f"state {v.var.name}: created by the step, nothing to keep")
                continue
            kept = rw.new_version(v)
            rw.create_op("skip_update", {"Skip": found, "Old": old, "New": v}, {"Out": kept},
                         role="optimize", after=graph.producer(v))
            outputs[i] = kept
            self.ctx.count("state updates guarded")
        rw.set_outputs(outputs)

    def _update_scale(self, found: Value, scale: Value) -> None:
        rw, amp = self.rw, self.amp
        good = self._state(GOOD_STEPS, 0)
        bad = self._state(BAD_STEPS, 0)
        outs = [rw.new_version(v) for v in (scale, good, bad)]
        rw.create_op("update_loss_scaling",
                     {"FoundInfinite": found, "PrevLossScaling": scale, "InGoodSteps": good,
                      "InBadSteps": bad},
                     {"LossScaling": outs[0], "OutGoodSteps": outs[1], "OutBadSteps": outs[2]},
                     {"incr_every_n_steps": amp.incr_every_n_steps,
                      "decr_every_n_nan_or_inf": amp.decr_every_n_nan_or_inf,
                      "incr_ratio": amp.incr_ratio, "decr_ratio": amp.decr_ratio},
                     role="optimize", after=self.graph.producer(found))
        rw.set_outputs(list(self.graph.outputs) + outs)
