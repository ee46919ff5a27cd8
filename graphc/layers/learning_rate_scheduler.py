"""Learning-rate schedules as ops (Paddle's layer functions): each returns an LR Variable.

A persistable step counter (``@LR_DECAY_COUNTER@``) is incremented once per run, from 0.
"""

from __future__ import annotations

from ..ir import unique_name
from ..ir.errors import ProgramError
from ..ir.program import default_main_program, default_startup_program

COUNTER = "@LR_DECAY_COUNTER@"


def _step_counter():
    """The global step (float32 [1]): 0 on the first run, +1 per run."""
    main, startup = default_main_program(), default_startup_program()
    block = main.global_block()
    if COUNTER in block.vars:
        return block.var(COUNTER)
    counter = block.create_var(COUNTER, [1], "float32", persistable=True, stop_gradient=True)
    sblock = startup.global_block()
    if COUNTER not in sblock.vars:
        svar = sblock.create_var(COUNTER, [1], "float32", persistable=True)
        sblock.append_op("fill_constant", outputs={"Out": svar},
                         attrs={"shape": [1], "dtype": "float32", "value": -1.0})
    with main.op_role_guard("lr_sched"):
        block._prepend_op("increment", {"X": counter}, {"Out": counter}, {"step": 1.0})
    return counter


def _schedule(op_type: str, inputs: dict, attrs: dict):
    main = default_main_program()
    block = main.global_block()
    out = block.create_var(unique_name.generate("learning_rate"), None, "float32",
                           stop_gradient=True)
    with main.op_role_guard("lr_sched"):
        block.append_op(op_type, {"Step": _step_counter(), **inputs}, {"Out": out}, attrs)
    return out


def piecewise_decay(boundaries, values):
    """values[i] while step < boundaries[i]; the last value after the last boundary."""
    if len(values) != len(boundaries) + 1:
        raise ProgramError(f"piecewise_decay: {len(boundaries)} boundaries need "
                           f"{len(boundaries) + 1} values, got {len(values)}")
    return _schedule("piecewise_decay", {}, {"boundaries": [int(b) for b in boundaries],
                                             "values": [float(v) for v in values]})


def cosine_decay(learning_rate: float, step_each_epoch: int, epochs: int):
    return _schedule("cosine_decay", {}, {"learning_rate": float(learning_rate),
                                          "step_each_epoch": int(step_each_epoch),
                                          "epochs": int(epochs)})


def linear_lr_warmup(learning_rate, warmup_steps: int, start_lr: float, end_lr: float):
    """Linear ramp from start_lr to end_lr over warmup_steps, then ``learning_rate``."""
    from .tensor import fill_constant
    if not hasattr(learning_rate, "name"):
        learning_rate = fill_constant([1], "float32", learning_rate)
    return _schedule("linear_warmup", {"LearningRate": learning_rate},
                     {"warmup_steps": int(warmup_steps), "start_lr": float(start_lr),
                      "end_lr": float(end_lr)})
