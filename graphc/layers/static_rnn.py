"""Fluid's ``StaticRNN``: a step block written with ordinary layers, run over the time axis (axis
0) of equal-length sequences. The ops appended inside ``step()`` become the body region of one
``recurrent`` op (ops/recurrent/), taken out with ir/regions.py (docs/control_flow.md)."""

from __future__ import annotations

from ..ir import unique_name
from ..ir.default_programs import default_main_program
from ..ir.errors import ProgramError
from ..ir.program import Variable
from ..ir.regions import BlockMark, body_text, drop_locals, take
from ..ir.source import user_source
from ..ir.types import types_compatible
from .helper import LayerHelper
from .manipulation import fill_constant_batch_size_like

_BEFORE, _IN, _AFTER = range(3)


def _error(method: str, message: str) -> ProgramError:
    where = user_source()
    return ProgramError(f"StaticRNN.{method}" + (f" at {where}" if where else "") + f": "
                        f"{message}")


class _Memory:
    """A memory: its value before the first step (``init``), the step's view of its value
    at the previous step (``pre_mem``), and the value it takes for the next one (``mem``)."""

    __slots__ = ("init", "pre_mem", "mem")

    def __init__(self, init, pre_mem):
        self.init, self.pre_mem, self.mem = init, pre_mem, None


class StaticRNN:
    """``with rnn.step():`` build one step from ``step_input(x)`` (slice t of a time-major
    ``[T, N, ...]`` value), ``memory``/``update_memory`` and ``step_output``; ``rnn()`` then
    gives each step output stacked over the steps, ``[T, ...]`` (a list when several).

    Values from outside the step (parameters, an encoder's output) are read as they are at
    every step; parameters created inside the step (an ``fc``) are created once and shared
    by every step."""

    BEFORE_RNN_BLOCK, IN_RNN_BLOCK, AFTER_RNN_BLOCK = _BEFORE, _IN, _AFTER

    def __init__(self, name=None):
        self.helper = LayerHelper("static_rnn", name)
        self.memories: dict[str, _Memory] = {}  # pre_mem name -> memory
        self.inputs: list = []  # (outer [T, N, ...] value, the step's slice of it)
        self.outputs: list = []  # the step's output values
        self.status = _BEFORE
        self.seq_len = None
        self._results: list = []
        self._boot_ops: list = []  # memories' initial values, computed before the loop

    def step(self):
        """``with rnn.step():`` the step's layers."""
        if self.status != _BEFORE:
            raise _error("step", "a StaticRNN has one step block")
        return _StepBlock(self)

    def _assert_in_rnn_block_(self, method: str) -> None:
        if self.status != _IN:
            raise _error(method, "must be called inside `with rnn.step():`")

    def _local(self, var) -> bool:
        """Whether ``var`` belongs to the step: computed by its ops, or a step's view."""
        if var.name in self.memories or var.name in {ph.name for _, ph in self.inputs}:
            return True
        return any(var.name in op.output_arg_names
                   for op in self._block.ops[self._mark.start:])

    def memory(self, init=None, shape=None, batch_ref=None, init_value=0.0,
               init_batch_dim_idx=0, ref_batch_dim_idx=1):
        """A value carried from step to step, ``init`` before the first step; without
        ``init``, ``shape`` (its batch dimension at ``init_batch_dim_idx`` taken from
        ``batch_ref``'s dimension ``ref_batch_dim_idx``) filled with ``init_value``."""
        self._assert_in_rnn_block_("memory")
        if init is None:
            if shape is None or batch_ref is None:
                raise _error("memory", "give init=, or shape= and batch_ref= (if init is "
                                       "None, memory needs shape and batch_ref)")
            return self.memory(init=self._boot(shape, batch_ref, init_value,
                                               init_batch_dim_idx, ref_batch_dim_idx))
        if not isinstance(init, Variable):
            raise _error("memory", f"init must be a Variable, got {type(init).__name__}")
        if self._local(init) and not any(init is boot for boot in self._boot_vars()):
            raise _error("memory", f"init ({init.name}) is computed inside the step; a "
                                   "memory's initial value comes from before step()")
        pre_mem = self._block.create_var(
            unique_name.generate(f"{self.helper.name}@mem"), list(init.shape), init.dtype)
        self.memories[pre_mem.name] = _Memory(init, pre_mem)
        return pre_mem

    def _boot_vars(self) -> list:
        return [var for _, var in self._boot_ops]

    def _boot(self, shape, batch_ref, value, init_dim: int, ref_dim: int):
        """The initial value of a memory made from ``shape``: appended now, moved before the
        recurrent op when the step ends (it is computed once, outside the loop)."""
        if not isinstance(batch_ref, Variable):
            raise _error("memory", f"batch_ref must be a Variable, got "
                                   f"{type(batch_ref).__name__}")
        # a step input's slice stands for the sequence it slices (Paddle names both alike)
        outer = {ph.name: x for x, ph in self.inputs}.get(batch_ref.name)
        if outer is None and self._local(batch_ref):
            raise _error("memory", f"batch_ref ({batch_ref.name}) is computed inside the "
                                   "step; give a value from before step() or a step input")
        ref = outer if outer is not None else batch_ref
        if not -len(ref.shape) <= ref_dim < len(ref.shape):
            raise _error("memory", f"ref_batch_dim_idx {ref_dim} is out of range for "
                                   f"batch_ref {ref.name} of shape {list(ref.shape)}")
        start = len(self._block.ops)
        boot = fill_constant_batch_size_like(ref, list(shape), ref.dtype, value,
                                             input_dim_idx=ref_dim, output_dim_idx=init_dim)
        self._boot_ops.extend((op, boot) for op in self._block.ops[start:])
        return boot

    def step_input(self, x):
        """Slice t of the time-major ``x`` (``[T, N, ...]``) at step t."""
        self._assert_in_rnn_block_("step_input")
        if not isinstance(x, Variable):
            raise _error("step_input", f"x must be a Variable, got {type(x).__name__}")
        if x.shape is None or len(x.shape) < 2:
            raise _error("step_input", f"x ({x.name}) has shape {x.shape}; a step input is "
                                       "time-major, [T, N, ...], of rank 2 or more")
        if x.lod_level:
            raise _error("step_input", f"x ({x.name}) is a LoD value; StaticRNN steps over "
                                       "padded [T, N, ...] values (DynamicRNN over LoD ones)")
        if self._local(x):
            raise _error("step_input", f"x ({x.name}) is computed inside the step")
        if self.seq_len is None or self.seq_len < 0:
            self.seq_len = x.shape[0]
        elif x.shape[0] >= 0 and x.shape[0] != self.seq_len:
            raise _error("step_input", f"x ({x.name}) has {x.shape[0]} steps but an earlier "
                                       f"step input has {self.seq_len}: StaticRNN only takes "
                                       "inputs of one fixed sequence length")
        ph = self._block.create_var(unique_name.generate(f"{self.helper.name}.step_in"),
                                    list(x.shape[1:]), x.dtype)
        self.inputs.append((x, ph))
        return ph

    def step_output(self, o):
        """Collect ``o`` at every step: ``rnn()`` gives it stacked, ``[T, ...]``."""
        self._assert_in_rnn_block_("step_output")
        if not isinstance(o, Variable):
            raise _error("step_output", f"o must be a Variable, got {type(o).__name__}")
        self.outputs.append(o)

    def output(self, *outputs):
        """``step_output`` of each of ``outputs``."""
        for o in outputs:
            self.step_output(o)

    def update_memory(self, mem, var):
        """The memory ``mem`` takes ``var``'s value for the next step (same shape and dtype)."""
        if not isinstance(mem, Variable) or not isinstance(var, Variable):
            raise _error("update_memory", "mem and var must be Variables, got "
                                          f"{type(mem).__name__} and {type(var).__name__}")
        memory = self.memories.get(mem.name)
        if memory is None or memory.pre_mem is not mem:
            raise _error("update_memory", f"'{mem.name}' is not a memory of this StaticRNN "
                                          "(make one with rnn.memory())")
        old, new = mem.type, var.type if var.shape is not None else None
        if new is not None and not types_compatible(old, new):
            raise _error("update_memory", f"memory '{mem.name}' is {old} but is updated to "
                                          f"'{var.name}', {new}: a memory keeps its shape and "
                                          "dtype from step to step")
        memory.mem = var

    def __call__(self, *args, **kwargs):
        if self.status != _AFTER:
            raise _error("__call__", "the outputs exist only after the step block")
        return self._results[0] if len(self._results) == 1 else list(self._results)

    # -- the step block becomes the body region ---------------------------------------------
    def _finish(self, where: str) -> None:
        if not self.inputs:
            raise ProgramError(f"StaticRNN at {where}: the step block has no step_input")
        if not self.outputs:
            raise ProgramError(f"StaticRNN at {where}: the step block has no step_output "
                               "(RNN has no output)")
        for m in self.memories.values():
            if m.mem is None:
                raise ProgramError(f"StaticRNN at {where}: memory '{m.pre_mem.name}' is never "
                                   "updated (call update_memory in every step)")
        block, mark = self._block, self._mark
        captured = take(mark)
        boot = {id(op) for op, _ in self._boot_ops}
        ops = [op for op in captured.ops if id(op) not in boot]
        placeholders = [m.pre_mem for m in self.memories.values()] + \
            [ph for _, ph in self.inputs]
        known = {p.name for p in placeholders}
        params: list[str] = []
        for op in ops:  # values the step reads from outside: parameters, outer values
            for n in op.input_arg_names:
                if n not in known and n not in params:
                    params.append(n)
            for n in op.output_arg_names:
                if n in mark.names:
                    raise ProgramError(f"StaticRNN at {where}: {op.where} writes '{n}', "
                                       "defined before the step; a step passes values on "
                                       "with update_memory and step_output only")
                known.add(n)
        outs = [m.mem.name for m in self.memories.values()] + [o.name for o in self.outputs]
        params += [n for n in dict.fromkeys(outs) if n not in known and n not in params]
        consts = [block.var(n) for n in params]
        body = body_text(block, ops, [*placeholders, *consts], outs, "step",
                         f"StaticRNN's step block at {where}")
        block.ops.extend(op for op, _ in self._boot_ops)  # the memories' initial values
        block.program._bump()
        self._results = [self.helper.create_variable_for_type_inference(o.dtype)
                         for o in self.outputs]
        self.helper.append_op(
            "recurrent", {"inputs": [x for x, _ in self.inputs],
                          "initial_states": [m.init for m in self.memories.values()],
                          "parameters": consts},
            {"outputs": self._results}, {"body": body}, source=where)
        # what the op reads stays (a feed or a memory's initial value made during the step)
        keep = [v.name for v in (*self._boot_vars(), *consts, *(x for x, _ in self.inputs),
                                 *(m.init for m in self.memories.values()))]
        drop_locals(mark, captured, keep=keep)


class _StepBlock:
    """The ``with`` block of ``rnn.step()`` (a class, not contextlib, so that the recurrent
    op's source line is the user's ``with`` line)."""

    def __init__(self, rnn: StaticRNN):
        self.rnn = rnn

    def __enter__(self):
        rnn = self.rnn
        rnn._block = default_main_program().current_block()
        rnn.helper.main_program = rnn._block.program  # the program the step is built in
        rnn._mark = BlockMark.of(rnn._block)
        rnn._where = user_source()
        rnn.status = _IN
        return rnn

    def __exit__(self, exc_type, exc, tb):
        rnn = self.rnn
        rnn.status = _AFTER
        if exc_type is None:
            rnn._finish(rnn._where or "unknown line")
        return False


__all__ = ["StaticRNN"]
