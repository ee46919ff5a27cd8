"""Fluid's ``DynamicRNN``: a step block written with ordinary layers, run over the time steps
of LoD sequences. The ops appended inside ``block()`` become the body graph of one
``dynamic_rnn`` op (ops/dynamic_rnn/), so no sub-block is needed (docs/lod.md)."""

from __future__ import annotations

from ..ir import unique_name
from ..ir.default_programs import default_main_program
from ..ir.errors import ProgramError
from ..ir.lod_demand import demand_lod
from ..ir.program import Parameter
from ..ir.regions import body_text
from ..ir.source import user_source
from ..ir.types import normalize_dtype
from .helper import LayerHelper, check_variable

_BEFORE, _IN, _AFTER = range(3)


class DynamicRNN:
    """``with drnn.block():`` build one step from ``step_input`` (token t of each sequence,
    a dense ``[N, ...]`` batch), ``static_input``, ``memory`` / ``update_memory`` and
    ``output``; ``drnn()`` then gives the outputs as LoD values with the step input's LoD.
    Finished sequences keep their memories; an empty sequence gives no output rows."""

    def __init__(self, name=None):
        self.helper = LayerHelper("dynamic_rnn", name)
        self._status = _BEFORE
        self._steps: list = []  # (outer LoD value, placeholder)
        self._statics: list = []
        self._memories: list = []  # [placeholder, init var or None, value, updated var]
        self._outputs: list = []
        self._results: list = []

    def _check(self, method: str, status: int = _IN) -> None:
        if self._status != status:
            where = {_BEFORE: "before block()", _IN: "inside block()",
                     _AFTER: "after block()"}[status]
            raise ProgramError(f"DynamicRNN.{method} must be called {where}")

    def _placeholder(self, like, shape=None, dtype=None, lod_level=0):
        shape = list(like.shape if shape is None else shape)
        return self._block.create_var(unique_name.generate(f"{self.helper.name}.step"),
                                      [-1, *shape[1:]], dtype or like.dtype,
                                      lod_level=lod_level)

    def block(self):
        """``with drnn.block():`` the step's layers (a context manager written here, not
        with contextlib, so the op's source line is the user's)."""
        self._check("block()", _BEFORE)
        return _StepBlock(self)

    def step_input(self, x, level=0):
        """Token t of every sequence of the LoD ``x`` at step t: a ``[N, ...]`` batch."""
        self._check("step_input()")
        check_variable("DynamicRNN.step_input", "x", x)
        if level == 0 and not x.lod_level and x.shape is not None:  # a feed declared dense
            demand_lod(x, 1, f"DynamicRNN.step_input at {user_source()}")
        if x.lod_level != 1 or level != 0:
            raise ProgramError(f"DynamicRNN.step_input: x ({x.name}) must be a LoD value of "
                               f"lod_level 1 stepped at level 0, got lod_level {x.lod_level}, "
                               f"level {level}")
        if self._steps and self._steps[0][0].name != x.name and x.shape[0] not in (-1,) \
                and x.shape[0] != self._steps[0][0].shape[0]:
            raise ProgramError("DynamicRNN.step_input: every step input must share the LoD "
                               "of the first")
        ph = self._placeholder(x)
        self._steps.append((x, ph))
        return ph

    def static_input(self, x):
        """``x`` as it is at every step: a dense ``[N, ...]`` value (one row per sequence) or
        a LoD value of N sequences, its rows those of the step input's sequences."""
        self._check("static_input()")
        check_variable("DynamicRNN.static_input", "x", x)
        ph = self._placeholder(x, lod_level=x.lod_level)
        self._statics.append((x, ph))
        return ph

    def memory(self, init=None, shape=None, value=0.0, need_reorder=False, dtype="float32"):
        """A state carried from step to step: from ``init`` (a dense ``[N, ...]`` value), or
        of ``shape`` (without the batch dimension) filled with ``value``."""
        self._check("memory()")
        if init is not None:
            check_variable("DynamicRNN.memory", "init", init)
            if init.lod_level:
                raise ProgramError(f"DynamicRNN.memory: init ({init.name}) must be a dense "
                                   "[num_sequences, ...] value, not a LoD value")
            ph = self._placeholder(init)
        else:
            if not isinstance(shape, list | tuple) or not shape:
                raise ProgramError("DynamicRNN.memory: give init= or shape= (the memory's "
                                   f"shape without the batch dimension), got shape={shape!r}")
            ph = self._placeholder(None, [-1, *shape], normalize_dtype(dtype))
        self._memories.append([ph, init, float(value), None])
        return ph

    def update_memory(self, ex_mem, new_mem):
        self._check("update_memory()")
        for mem in self._memories:
            if mem[0].name == ex_mem.name:
                check_variable("DynamicRNN.update_memory", "new_mem", new_mem)
                mem[3] = new_mem
                return
        raise ProgramError(f"DynamicRNN.update_memory: '{ex_mem.name}' is not a memory of "
                           "this DynamicRNN")

    def output(self, *outputs):
        self._check("output()")
        for o in outputs:
            self._outputs.append(check_variable("DynamicRNN.output", "output", o))

    def __call__(self, *args, **kwargs):
        self._check("__call__()", _AFTER)
        return self._results[0] if len(self._results) == 1 else list(self._results)

    # -- the step block becomes the body graph ---------------------------------------------
    def _finish(self, start: int, names_before: set) -> None:
        block = self._block
        if not self._steps:
            raise ProgramError("DynamicRNN: the block has no step_input")
        if not self._outputs:
            raise ProgramError("DynamicRNN: the block has no output()")
        for ph, _, _, new in self._memories:
            if new is None:
                raise ProgramError(f"DynamicRNN: memory '{ph.name}' is never updated "
                                   "(call update_memory)")
        ops = block.ops[start:]
        del block.ops[start:]
        placeholders = [m[0] for m in self._memories] + [p for _, p in self._steps] + \
            [p for _, p in self._statics]
        local = {p.name for p in placeholders}
        consts = []
        for op in ops:  # values the step reads from outside: parameters, other outer values
            for n in op.input_arg_names:
                if n not in local and n not in {c.name for c in consts}:
                    consts.append(block.var(n))
            local.update(op.output_arg_names)
        body = self._body(ops, placeholders, consts)
        inits = [m[1] for m in self._memories if m[1] is not None]
        init_from, k = [], 0
        for m in self._memories:
            init_from.append(k if m[1] is not None else -1)
            k += m[1] is not None
        self._results = [self.helper.create_variable_for_type_inference(o.dtype)
                         for o in self._outputs]
        self.helper.append_op(
            "dynamic_rnn", {"Init": inits, "Xs": [x for x, _ in self._steps],
                            "Consts": [x for x, _ in self._statics] + consts},
            {"Out": self._results},
            {"body": body, "init_from": init_from,
             "init_values": [m[2] for m in self._memories]})
        # the step's own variables live in the body now (parameters stay: the startup
        # program initialises them and the op reads them as constants)
        for name in set(block.vars) - names_before:
            if not isinstance(block.vars[name], Parameter) and name in local:
                del block.vars[name]

    def _body(self, ops, placeholders, consts) -> str:
        outputs = [m[3].name for m in self._memories] + [o.name for o in self._outputs]
        return body_text(self._block, ops, [*placeholders, *consts], outputs, "step",
                         "DynamicRNN's step block")


class _StepBlock:
    def __init__(self, rnn: DynamicRNN):
        self.rnn = rnn

    def __enter__(self):
        rnn = self.rnn
        rnn._block = default_main_program().global_block()
        self.start, self.names = len(rnn._block.ops), set(rnn._block.vars)
        rnn._status = _IN
        return rnn

    def __exit__(self, exc_type, exc, tb):
        self.rnn._status = _AFTER
        if exc_type is None:
            self.rnn._finish(self.start, self.names)
        return False


__all__ = ["DynamicRNN"]
