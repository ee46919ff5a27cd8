"""PipelineOptimizer: Paddle's pipeline training as one compiled step, the fed batch run as
microbatches whose gradients are summed before the wrapped optimizer's single update."""

from __future__ import annotations

from ...ir.errors import ProgramError
from ...ir.opdef import RANDOM, get_op_def
from ...ir.program import Operator, Variable
from ...ir.regions import body_text
from ...ir.source import user_source
from ...ir.types import FLOAT_DTYPES
from .base import Optimizer

__all__ = ["PipelineOptimizer"]

GRAD_SUFFIX = "@GRAD"
SUM_SUFFIX = "@MICROBATCH_SUM"


def _int(value, name: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ProgramError(f"PipelineOptimizer: {name} must be an int >= {least}, got "
                           f"{value!r}")
    return value


class PipelineOptimizer:
    """Paddle's PipelineOptimizer (1.6-1.8 arguments; Paddle 2.x's ``num_microbatches`` as a
    keyword).

    Paddle 1.6-1.8 ran the program's sections (cut at ``cut_list``) in threads joined by
    queues, each minibatch updating the parameters as it reached the last section: without
    the threads' staleness that is one update per minibatch, which graphc computes. Paddle
    2.x splits each minibatch into ``num_microbatches`` run through the sections in turn.

    ``minimize`` builds the inner optimizer's backward and update; with
    ``num_microbatches > 1`` the forward and backward run once per microbatch of the fed
    batch, the gradients of the microbatch losses (each scaled by 1/num_microbatches, as
    Paddle 2.x scales the loss gradient) summed, and the inner optimizer updates once.
    ``cut_list``/``place_list``/``concurrency_list`` and ``device_guard`` sections are checked
    and recorded on the program (``_pipeline_opt``): XLA places the compiled step."""

    def __init__(self, optimizer, cut_list=None, place_list=None, concurrency_list=None,
                 queue_size=30, sync_steps=1, start_cpu_core_id=0, *, num_microbatches=1):
        if not isinstance(optimizer, Optimizer):
            raise ProgramError("PipelineOptimizer: optimizer must be a graphc optimizer (SGD, "
                               f"Adam, ...), got {type(optimizer).__name__}")
        if isinstance(cut_list, int) and not isinstance(cut_list, bool):
            raise ProgramError(
                f"PipelineOptimizer: cut_list must be a list of Variable lists, got "
                f"{cut_list!r}; Paddle 1.8's second argument is cut_list; Paddle 2.x's "
                f"num_microbatches is a keyword here: PipelineOptimizer(opt, "
                f"num_microbatches={cut_list})")
        self._optimizer = optimizer
        self._cut_list = self._checked_cuts(cut_list)
        sections = 2 * len(self._cut_list) - 1 if self._cut_list else 1
        self._place_list = self._checked_list(place_list, "place_list", sections)
        self._concurrency_list = self._checked_list(concurrency_list, "concurrency_list",
                                                    sections)
        for c in self._concurrency_list or ():
            _int(c, "each concurrency_list entry", 1)
        self._queue_size = _int(queue_size, "queue_size", 1)
        self._sync_steps = _int(sync_steps, "sync_steps", -1)
        self._start_cpu_core_id = _int(start_cpu_core_id, "start_cpu_core_id", 0)
        self._num_microbatches = _int(num_microbatches, "num_microbatches", 1)
        self.type = optimizer.type

    @staticmethod
    def _checked_cuts(cut_list) -> list[list[Variable]]:
        if cut_list is None:
            return []
        if not isinstance(cut_list, list | tuple) or not all(
                isinstance(cut, list | tuple) and all(isinstance(v, Variable) for v in cut)
                for cut in cut_list):
            raise ProgramError("PipelineOptimizer: cut_list must be a list of Variable lists "
                               "(the variables each section ends at)")
        return [list(cut) for cut in cut_list]

    def _checked_list(self, given, name: str, sections: int):
        if given is None:
            return None
        if not isinstance(given, list | tuple):
            raise ProgramError(f"PipelineOptimizer: {name} must be a list, got "
                               f"{type(given).__name__}")
        if self._cut_list and len(given) != sections:
            raise ProgramError(
                f"PipelineOptimizer: {name} has {len(given)} entries, but a cut_list of "
                f"{len(self._cut_list)} cuts makes {sections} sections (2*len(cut_list)-1)")
        return list(given)

    def minimize(self, loss, startup_program=None, parameter_list=None, no_grad_set=None):
        """Append the backward, the microbatch loop (num_microbatches > 1) and the inner
        optimizer's update; returns None, as Paddle 1.8's does."""
        if not isinstance(loss, Variable):
            raise ProgramError(f"PipelineOptimizer.minimize: loss must be a Variable, got "
                               f"{type(loss).__name__}")
        program = loss.block.program
        names = {v.name for cut in self._cut_list for v in cut}
        unknown = sorted(n for n in names if not loss.block.has_var(n))
        if unknown:
            raise ProgramError(f"PipelineOptimizer: cut_list names {unknown}, which are not "
                               "variables of the loss's program")
        inner = self._optimizer
        params_grads = inner.backward(loss, startup_program, parameter_list, no_grad_set)
        sections = _sections(loss.block.ops)
        if self._num_microbatches > 1:  # the sections of the loop's body ops, by position
            sections = _build_loop(loss, params_grads, self._num_microbatches)
        inner.apply_optimize(loss, startup_program, params_grads)
        program._pipeline_opt = {
            "trainer": "PipelineTrainer", "device_worker": "Section",
            "cut_list": [[v.name for v in cut] for cut in self._cut_list],
            "place_list": self._place_list, "concurrency_list": self._concurrency_list,
            "queue_size": self._queue_size, "sync_steps": self._sync_steps,
            "start_cpu_core_id": self._start_cpu_core_id,
            "num_microbatches": self._num_microbatches, "sections": sections,
        }

    # the inner optimizer's state is the pipeline's (checkpoints map by its names)
    def state_dict(self, scope=None):
        return self._optimizer.state_dict(scope)

    def set_dict(self, state_dict, scope=None):
        self._optimizer.set_dict(state_dict, scope)


def _sections(ops) -> list[str]:
    """The device_guard sections of ``ops`` as ``"device: ops a..b"`` runs (forward ops carry
    the device their guard gave them; others none)."""
    runs: list[list] = []
    for i, op in enumerate(ops):
        device = getattr(op, "device", "") or ""
        if not device:
            continue
        if runs and runs[-1][0] == device and runs[-1][2] == i - 1:
            runs[-1][2] = i
        else:
            runs.append([device, i, i])
    return [f"{d}: ops {a}..{b}" for d, a, b in runs]


def _build_loop(loss, params_grads, m: int) -> list[str]:
    """Replace the forward and backward ops of ``loss``'s block by one microbatch_loop op;
    returns the device_guard sections of its body."""
    block = loss.block
    program = block.program
    where = f"PipelineOptimizer(num_microbatches={m})"
    ops = list(block.ops)
    stray = [op for op in ops if op.role == "optimize"]
    if stray:
        raise ProgramError(f"{where}: the program already has optimizer ops ({stray[0].where});"
                           " minimize it once, with the PipelineOptimizer")
    for p, g in params_grads:
        if g is not None and block.var(g.name).selected_rows:
            raise ProgramError(f"{where}: the gradient of '{p.name}' is row-sparse "
                               "(is_sparse=True): microbatch gradients are summed as dense "
                               "values; build the lookup with is_sparse=False")
    grads = [g.name for _, g in params_grads if g is not None]
    outside, body_ops = _hoist(block, ops)
    loss_grad = loss.name + GRAD_SUFFIX
    seeds = [i for i, op in enumerate(body_ops) if op.type == "fill_constant"
             and op.role == "backward" and op.output_arg_names == [loss_grad]]
    if len(seeds) != 1:  # without it the summed gradients would be num_microbatches times
        raise ProgramError(f"{where}: found {len(seeds)} loss-gradient seeds "
                           f"('{loss_grad}' filled with ones), expected one")
    body_ops[seeds[0]] = _scaled(body_ops[seeds[0]], 1.0 / m)
    reads, writes = _reads_writes(body_ops)
    state = [n for n in writes if block.var(n).persistable]
    outer_reads = [n for n in reads if n not in state]
    batch = [n for n in outer_reads if block.var(n).is_data]
    consts = [n for n in outer_reads if n not in batch]
    for n in batch:
        var = block.var(n)
        if not var.shape or var.shape[0] != -1 or var.lod_level or var.selected_rows:
            raise ProgramError(
                f"{where}: feed '{n}' is {var.type}; the microbatches split each fed value "
                "along its first dimension, which must be the batch (-1) of a dense "
                "(non-LoD) value")
    exports, merges = _exports(block, body_ops, set(grads) | set(state))
    sections = _sections(body_ops)
    sums = []
    with program.op_role_guard("backward"):
        for g in grads:
            var = block.var(g)
            acc = block.create_var(g + SUM_SUFFIX, var.shape, var.dtype)
            sums.append(acc.name)
        add = get_op_def("sum")
        body_ops = body_ops + [
            Operator(block, "sum", {"X": [acc, g]}, {"Out": [acc]},
                     add.normalize_attrs({}, where), None, "backward")
            for acc, g in zip(sums, grads)]
        inputs = [block.var(n) for n in (*sums, *state, *batch, *consts)]
        body = body_text(block, body_ops, inputs, [*sums, *state, *exports], "microbatch",
                         where)
        for acc in sums:
            del block.vars[acc]
        del block.ops[:]
        block.ops.extend(outside)
        program._bump()
        with program.source_guard(user_source()):
            loop = block.append_op(
                "microbatch_loop",
                {"Batch": batch, "State": state, "Consts": consts},
                {"GradSum": grads, "StateOut": state, "Out": exports},
                {"body": body, "num_microbatches": m, "num_grads": len(grads),
                 "merges": merges, "sections": sections})
    # clone(for_test=True) gives a test program these forward ops in the loop's place
    loop.forward_ops = [op for op in body_ops if op.role == "forward"]
    return sections


def _scaled(op, factor: float):
    """A copy of the loss gradient's fill_constant giving ``factor`` (Paddle 2.x scales the
    loss gradient by 1/num_microbatches)."""
    attrs = {**op.attrs, "value": float(op.attrs["value"]) * factor}
    return Operator(op.block, op.type, op.inputs, op.outputs, attrs, op.source, op.role)


def _hoist(block, ops):
    """Split ``ops`` into those that stay outside the loop (learning-rate schedules and the
    forward ops that read neither the batch nor anything a microbatch changes: they would
    give every microbatch the same value, and a schedule's counter must advance once per
    step) and the loop's body."""
    writers: dict[str, int] = {}
    for op in ops:
        for n in op.output_arg_names:
            writers[n] = writers.get(n, 0) + 1
    in_body_writes = {n for op in ops if op.role != "lr_sched" for n in op.output_arg_names}
    outside, body, invariant = [], [], set()

    def fixed(n: str) -> bool:
        var = block.var(n)
        if n in invariant:
            return True
        if var.is_data:
            return False
        return n not in in_body_writes  # a persistable or an outer value nothing changes

    for op in ops:
        outs = op.output_arg_names
        if op.role == "lr_sched":
            outside.append(op)
            continue
        hoist = (op.role == "forward" and outs
                 and not get_op_def(op.type).has_trait(RANDOM)
                 and all(fixed(n) for n in op.input_arg_names)
                 and not any(block.var(n).persistable or writers[n] > 1 for n in outs))
        if hoist:
            outside.append(op)
            invariant.update(outs)
            in_body_writes.difference_update(outs)
        else:
            body.append(op)
    return outside, body


def _reads_writes(ops):
    written: set[str] = set()
    reads: list[str] = []
    writes: list[str] = []
    for op in ops:
        for n in op.input_arg_names:
            if n not in written and n not in reads:
                reads.append(n)
        for n in op.output_arg_names:
            if n not in writes:
                writes.append(n)
            written.add(n)
    return reads, writes


def _exports(block, body_ops, skip: set[str]):
    """The forward values the loop gives back (fetchable after it, by their names): a value
    whose first dimension is the batch as the microbatches' rows in order; a float value of
    known shape (the loss, a metric) as its mean over microbatches; others stay inside."""
    names, merges = [], []
    for op in body_ops:
        if op.role != "forward":
            continue
        for n in op.output_arg_names:
            var = block.var(n)
            if n in skip or n in names or var.persistable or var.is_array or \
                    var.selected_rows or var.lod_level or var.shape is None:
                continue
            if var.shape[:1] == (-1,):
                names.append(n)
                merges.append("rows")
            elif all(d >= 0 for d in var.shape) and var.dtype in FLOAT_DTYPES:
                names.append(n)
                merges.append("mean")
    return names, merges
