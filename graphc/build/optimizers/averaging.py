"""Paddle 1.8's parameter averaging for evaluation: ModelAverage (windowed sums) and
ExponentialMovingAverage, each with ``apply(executor)`` / ``restore(executor)``."""

from __future__ import annotations

import contextlib

from ...ir import unique_name
from ...ir.default_programs import default_main_program, default_startup_program
from ...ir.errors import ProgramError
from ...ir.program import Program, Variable
from ..backward import append_backward
from .base import _scope


def _persistable(block, startup, name: str, shape, dtype: str, value: float) -> Variable:
    """A persistable variable of the main program, filled with ``value`` by the startup."""
    var = block.create_var(name, shape, dtype, persistable=True, stop_gradient=True)
    sblock = startup.global_block()
    if name not in sblock.vars:
        svar = sblock.create_var(name, shape, dtype, persistable=True)
        sblock.append_op("fill_constant", {}, {"Out": svar},
                         {"shape": [int(d) for d in shape], "dtype": dtype, "value": float(value)})
    return var


def _averaged_parameters(program) -> list:
    """The parameters averaged: all but those whose ParamAttr says do_model_average=False."""
    return [p for p in program.global_block().all_parameters()
            if getattr(p, "do_model_average", None) is not False]


class _Averaging:
    """What both averages share: an apply program (back each parameter up, write its
    average) and a restore program (write the backup back), run on the executor's scope."""

    def _build_programs(self, params, write_average) -> None:
        self.apply_program, self.restore_program = Program(), Program()
        backups = {}
        ablock = self.apply_program.global_block()
        for p in params:
            param = ablock.create_var(p.name, p.shape, p.dtype, persistable=True)
            backup = ablock.create_var(unique_name.generate(f"{p.name}.{self._backup_suffix}"),
                                       p.shape, p.dtype, persistable=True)
            backups[p.name] = backup
            ablock.append_op("assign", {"X": param}, {"Out": backup})
            ablock.append_op("assign", {"X": write_average(ablock, p)}, {"Out": param})
        rblock = self.restore_program.global_block()
        for p in params:
            b = backups[p.name]
            backup = rblock.create_var(b.name, p.shape, p.dtype, persistable=True)
            param = rblock.create_var(p.name, p.shape, p.dtype, persistable=True)
            rblock.append_op("assign", {"X": backup}, {"Out": param})

    @contextlib.contextmanager
    def apply(self, executor, need_restore: bool = True):
        """Parameters hold their averages inside the block; restored after it unless
        ``need_restore`` is False (then call ``restore(executor)``)."""
        executor.run(self.apply_program)
        try:
            yield
        finally:
            if need_restore:
                self.restore(executor)

    def restore(self, executor) -> None:
        executor.run(self.restore_program)

    @staticmethod
    def _read(block, var: Variable) -> Variable:
        return block.create_var(var.name, var.shape, var.dtype, persistable=True)


class ModelAverage(_Averaging):
    # Paddle's ModelAverage is an Optimizer: its methods, where averaging gives them meaning
    """Average each parameter over a window of recent updates (Paddle's average_accumulates):
    build it after ``minimize``; its ops run after the parameter updates of each step."""

    _backup_suffix = "tmp"

    def __init__(self, average_window_rate, min_average_window=10000, max_average_window=10000,
                 regularization=None, name=None):
        if int(min_average_window) > int(max_average_window):
            raise ProgramError(f"ModelAverage: min_average_window {min_average_window} > "
                               f"max_average_window {max_average_window}")
        self.average_window = float(average_window_rate)
        self.min_average_window = int(min_average_window)
        self.max_average_window = int(max_average_window)
        self.regularization, self._name = regularization, name
        main, startup = default_main_program(), default_startup_program()
        block = main.global_block()
        params = _averaged_parameters(main)
        self._accumulators: dict[str, dict[str, Variable]] = {}
        with main.op_role_guard("optimize"):
            for p in params:
                self._accumulators[p.name] = acc = self._add_accumulators(block, startup, p)
                block.append_op(
                    "average_accumulates", {"param": p, **{f"in_{k}": v for k, v in acc.items()}},
                    {f"out_{k}": v for k, v in acc.items()},
                    {"average_window": self.average_window,
                     "min_average_window": self.min_average_window,
                     "max_average_window": self.max_average_window})
        self._build_programs(params, self._average_of)

    @staticmethod
    def _add_accumulators(block, startup, p) -> dict[str, Variable]:
        acc = {}
        for name in ("sum_1", "sum_2", "sum_3"):
            acc[name] = _persistable(block, startup, unique_name.generate(f"{p.name}_{name}"),
                                     list(p.shape), p.dtype, 0.0)
        for name in ("num_accumulates", "old_num_accumulates", "num_updates"):
            acc[name] = _persistable(block, startup, unique_name.generate(f"{p.name}_{name}"),
                                     [1], "int64", 0.0)
        return acc

    def backward(self, loss, startup_program=None, parameter_list=None, no_grad_set=None,
                 callbacks=None):
        return append_backward(loss, parameter_list, no_grad_set, callbacks)

    def apply_gradients(self, params_grads):
        """No update ops: the averaging ops were appended when this ModelAverage was built."""
        return []

    def apply_optimize(self, loss, startup_program, params_grads):
        return self.apply_gradients(params_grads)

    def minimize(self, loss, startup_program=None, parameter_list=None, no_grad_set=None,
                 grad_clip=None):
        params_grads = self.backward(loss, startup_program, parameter_list, no_grad_set)
        return self.apply_gradients(params_grads), params_grads

    def get_opti_var_name_list(self) -> list[str]:
        return [v.name for acc in self._accumulators.values() for v in acc.values()]

    def state_dict(self, scope=None) -> dict:
        """{accumulator name: value} from ``scope`` (default: the global scope)."""
        scope = _scope(scope)
        return {n: scope[n] for n in self.get_opti_var_name_list() if n in scope}

    def set_dict(self, state_dict, scope=None) -> None:
        own = set(self.get_opti_var_name_list())
        scope = _scope(scope)
        for name, value in state_dict.items():
            if name not in own:
                raise ProgramError(f"ModelAverage.set_dict: '{name}' is not one of its "
                                   "accumulators")
            scope[name] = value

    def _average_of(self, block, p) -> Variable:
        acc = {k: self._read(block, v) for k, v in self._accumulators[p.name].items()}
        out = block.create_var(unique_name.generate(f"{p.name}.average"), p.shape, p.dtype)
        block.append_op("model_average_apply",
                        {"Sum1": acc["sum_1"], "Sum2": acc["sum_2"], "Sum3": acc["sum_3"],
                         "NumAccumulates": acc["num_accumulates"],
                         "OldNumAccumulates": acc["old_num_accumulates"]}, {"Out": out})
        return out


class ExponentialMovingAverage(_Averaging):
    """ema = decay * ema + (1 - decay) * param after each step's update (``update()``), read
    bias-corrected, ema / (1 - decay^t), by ``apply``. With ``thres_steps`` (a [1] Variable,
    e.g. a step counter) the decay is min(decay, (1 + t) / (10 + t)).

    Unlike Paddle 1.8, whose apply program wrote the corrected value back into the EMA itself
    (so training on after ``apply`` continued from it; fixed in Paddle 2.0), ``apply`` leaves
    the moving averages untouched."""

    _backup_suffix = "ema_tmp"
    STEP_COUNTER = "@EMA_STEP_COUNTER@"

    def __init__(self, decay=0.999, thres_steps=None, name=None):
        if isinstance(decay, bool) or not isinstance(decay, int | float):
            raise ProgramError(f"ExponentialMovingAverage: decay must be a float, got {decay!r}")
        if thres_steps is not None and not isinstance(thres_steps, Variable):
            raise ProgramError("ExponentialMovingAverage: thres_steps must be a Variable or "
                               f"None, got {thres_steps!r}")
        self._decay, self._thres_steps = float(decay), thres_steps
        self._name = name or ""
        main, startup = default_main_program(), default_startup_program()
        self._main, self._startup = main, startup
        block = main.global_block()
        self._decay_var = _persistable(block, startup, "scheduled_ema_decay_rate", [1],
                                       "float32", self._decay)
        if thres_steps is not None:
            with main.op_role_guard("lr_sched"):
                block.append_op("ema_decay", {"ThresSteps": thres_steps},
                                {"Out": self._decay_var}, {"decay": self._decay})
        self._params = _averaged_parameters(main)
        self._ema_vars = {p.name: _persistable(
            block, startup, unique_name.generate(f"{self._name}{p.name}_ema"), list(p.shape),
            p.dtype, 0.0) for p in self._params}
        self._step = _persistable(block, startup, self.STEP_COUNTER, [1], "int64", 0.0)
        self._build_programs(self._params, self._average_of)

    def update(self) -> None:
        """Append the moving-average update (and the step count) to the main program."""
        block = self._main.global_block()
        with self._main.op_role_guard("optimize"):
            block.append_op("increment", {"X": self._step}, {"Out": self._step}, {"step": 1.0})
            for p in self._params:
                ema = self._ema_vars[p.name]
                block.append_op("ema_update", {"Param": p, "Ema": ema, "Decay": self._decay_var},
                                {"EmaOut": ema})

    def _average_of(self, block, p) -> Variable:
        out = block.create_var(unique_name.generate(f"{p.name}.ema_corrected"), p.shape, p.dtype)
        block.append_op("ema_bias_corrected",
                        {"Ema": self._read(block, self._ema_vars[p.name]),
                         "Decay": self._read(block, self._decay_var),
                         "Step": self._read(block, self._step)}, {"Out": out})
        return out


__all__ = ["ModelAverage", "ExponentialMovingAverage"]
