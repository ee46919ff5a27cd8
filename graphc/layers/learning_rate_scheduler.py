"""Learning-rate schedules as ops (Paddle's layer functions): each returns an LR Variable.

A persistable step counter (``@LR_DECAY_COUNTER@``) is incremented once per run, from 0
(noam_decay's from 1, as Paddle's; the first schedule built fixes where it starts).
"""

from __future__ import annotations

from ..ir import unique_name
from ..ir.default_programs import default_main_program, default_startup_program
from ..ir.errors import ProgramError
from ..ir.program import Variable

COUNTER = "@LR_DECAY_COUNTER@"


def global_counter(name: str, begin: int = 0, step: float = 1, dtype="float32",
                   role: str | None = None) -> Variable:
    """A persistable [1] counter ``name``: ``begin - 1 + step`` on the first run (Paddle's
    start), +``step`` per run (an ``increment`` first in the main program; the first caller
    fixes begin and step)."""
    main, startup = default_main_program(), default_startup_program()
    block = main.global_block()
    if name in block.vars:
        return block.var(name)
    counter = block.create_var(name, [1], dtype, persistable=True, stop_gradient=True)
    sblock = startup.global_block()
    if name not in sblock.vars:
        svar = sblock.create_var(name, [1], dtype, persistable=True)
        sblock.append_op("fill_constant", outputs={"Out": svar},
                         attrs={"shape": [1], "dtype": dtype, "value": float(begin - 1)})
    if role is None:
        block._prepend_op("increment", {"X": counter}, {"Out": counter}, {"step": float(step)})
    else:
        with main.op_role_guard(role):
            block._prepend_op("increment", {"X": counter}, {"Out": counter},
                              {"step": float(step)})
    return counter


def _step_counter(begin: int = 0):
    """The global step (float32 [1]): ``begin`` on the first run, +1 per run."""
    return global_counter(COUNTER, begin, 1, "float32", role="lr_sched")


def _decay_step_counter(begin=0):
    """Paddle's name for the global step counter (PaddleCV's utilities call it): float32
    [1], ``begin`` on the first run and +1 per run, shared with the LR schedules."""
    return _step_counter(begin)


def _schedule(op_type: str, inputs: dict, attrs: dict, begin: int = 0, dtype="float32",
              global_name: str | None = None):
    main = default_main_program()
    block = main.global_block()
    step = _step_counter(begin)  # first: a program lists its state in creation order
    if global_name is None:
        out = block.create_var(unique_name.generate("learning_rate"), None, dtype,
                               stop_gradient=True)
    else:
        out = _global_lr(global_name, dtype)
    with main.op_role_guard("lr_sched"):
        block.append_op(op_type, {"Step": step, **inputs}, {"Out": out}, attrs)
    return out


def _global_lr(name: str, dtype: str) -> Variable:
    """Paddle's piecewise_decay / linear_lr_warmup write a persistable [1] global ``name``
    (0.0 after the startup program): scripts read the current rate from the scope by that
    name (``global_scope().find_var("learning_rate")``), before the first step too. The
    first schedule of its kind in a program takes the name."""
    block = default_main_program().global_block()
    if name in block.vars:
        # a second schedule of the kind in one program: Paddle's would overwrite the first's
        # global (a fetch of either reads the last); each keeps its own value here
        name = unique_name.generate(name)
    out = block.create_var(name, [1], dtype, persistable=True, stop_gradient=True)
    sblock = default_startup_program().global_block()
    if name not in sblock.vars:
        svar = sblock.create_var(name, [1], dtype, persistable=True)
        sblock.append_op("fill_constant", outputs={"Out": svar},
                         attrs={"shape": [1], "dtype": dtype, "value": 0.0})
    return out


def _float(schedule: str, name: str, value) -> float:
    """Schedules take Python numbers (Paddle's Variable learning rates are not supported)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ProgramError(f"{schedule}: {name} must be a Python float, got "
                           f"{type(value).__name__} {value!r}")
    return float(value)


def _steps(schedule: str, name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0 \
            or int(value) != value:
        raise ProgramError(f"{schedule}: {name} must be a positive integer, got {value!r}")
    return int(value)


def piecewise_decay(boundaries, values):
    """values[i] while step < boundaries[i]; the last value after the last boundary."""
    if len(values) != len(boundaries) + 1:
        raise ProgramError(f"piecewise_decay: {len(boundaries)} boundaries need "
                           f"{len(boundaries) + 1} values, got {len(values)}")
    return _schedule("piecewise_decay", {}, {"boundaries": [int(b) for b in boundaries],
                                             "values": [float(v) for v in values]},
                     global_name="learning_rate")


def cosine_decay(learning_rate: float, step_each_epoch: int, epochs: int):
    return _schedule("cosine_decay", {}, {"learning_rate": float(learning_rate),
                                          "step_each_epoch": int(step_each_epoch),
                                          "epochs": int(epochs)})


def _decay(op_type, learning_rate, decay_steps, decay_rate, staircase):
    return _schedule(op_type, {}, {
        "learning_rate": _float(op_type, "learning_rate", learning_rate),
        "decay_steps": _steps(op_type, "decay_steps", decay_steps),
        "decay_rate": _float(op_type, "decay_rate", decay_rate), "staircase": bool(staircase)})


def exponential_decay(learning_rate, decay_steps, decay_rate, staircase=False):
    """learning_rate * decay_rate ** (step / decay_steps), the exponent floored if staircase."""
    return _decay("exponential_decay", learning_rate, decay_steps, decay_rate, staircase)


def natural_exp_decay(learning_rate, decay_steps, decay_rate, staircase=False):
    """learning_rate * exp(-decay_rate * (step / decay_steps)), floored if staircase."""
    return _decay("natural_exp_decay", learning_rate, decay_steps, decay_rate, staircase)


def inverse_time_decay(learning_rate, decay_steps, decay_rate, staircase=False):
    """learning_rate / (1 + decay_rate * (step / decay_steps)), floored if staircase."""
    return _decay("inverse_time_decay", learning_rate, decay_steps, decay_rate, staircase)


def polynomial_decay(learning_rate, decay_steps, end_learning_rate=0.0001, power=1.0,
                     cycle=False):
    """(lr - end) * (1 - step / decay_steps) ** power + end; the step stops at decay_steps,
    or with ``cycle`` decay_steps grows to the next multiple of itself."""
    name = "polynomial_decay"
    return _schedule(name, {}, {
        "learning_rate": _float(name, "learning_rate", learning_rate),
        "decay_steps": _steps(name, "decay_steps", decay_steps),
        "end_learning_rate": _float(name, "end_learning_rate", end_learning_rate),
        "power": _float(name, "power", power), "cycle": bool(cycle)})


def noam_decay(d_model, warmup_steps, learning_rate=1.0):
    """The Transformer's schedule; its step counts from 1 (Paddle's counter begin=1)."""
    name = "noam_decay"
    return _schedule(name, {}, {"d_model": _float(name, "d_model", d_model),
                                "warmup_steps": _steps(name, "warmup_steps", warmup_steps),
                                "learning_rate": _float(name, "learning_rate", learning_rate)},
                     begin=1)


def linear_lr_warmup(learning_rate, warmup_steps, start_lr, end_lr):
    """Linear ramp from start_lr to end_lr over warmup_steps, then ``learning_rate`` (a float
    or a [1] Variable such as another schedule's output)."""
    from .tensor import fill_constant
    name = "linear_lr_warmup"
    if not isinstance(learning_rate, Variable):
        learning_rate = fill_constant([1], "float32", _float(name, "learning_rate",
                                                             learning_rate))
    return _schedule(name, {"LearningRate": learning_rate},
                     {"warmup_steps": _steps(name, "warmup_steps", warmup_steps),
                      "start_lr": _float(name, "start_lr", start_lr),
                      "end_lr": _float(name, "end_lr", end_lr)}, dtype=learning_rate.dtype,
                     global_name="learning_rate_warmup")
