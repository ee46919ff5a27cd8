"""The Optimizer base class and Paddle's first four optimizers: SGD, Momentum, Adam, AdamW
(names, formulas and state as Paddle's); the package re-exports them with the others.

``minimize(loss)`` = append_backward + clipping + regularisation + one update op per parameter.
"""

from __future__ import annotations

import functools
import inspect

import numpy as np

from ...ir import unique_name
from ...ir.default_programs import default_startup_program
from ...ir.errors import ProgramError
from ...ir.graph import gc_paused
from ...ir.program import Parameter, Variable
from ...ir.source import user_source
from ..backward import append_backward
from ..regularizer import L2Decay, append_regularization_ops


def _scope(scope):
    """``scope``, else the process's global scope: state_dict/set_dict read and write values,
    the one place program construction touches the run-time (test_layering allows exactly
    this import; building a program never runs one)."""
    if scope is not None:
        return scope
    from ...runtime.scope import global_scope
    return global_scope()


def _parameter_list(opt, given) -> list | None:
    """``parameter_list`` as a list; a regularizer or clip here is a Paddle 1.6 positional
    call (1.8, which graphc follows, put parameter_list before regularization): say so."""
    if given is None:
        return None
    if isinstance(given, str) or not hasattr(given, "__iter__"):
        raise ProgramError(
            f"{type(opt).__name__}: parameter_list must be a list of parameters, got "
            f"{type(given).__name__}; Paddle 1.8 (and graphc) take parameter_list where 1.6 "
            "took regularization: pass regularization=/name= by keyword "
            "(docs/porting_from_paddle.md)")
    return list(given)


def paddle16_positional(*tail: str):
    """Class decorator: also serve Paddle 1.6's positional call, whose arguments after the
    hyper-parameters were ``tail`` (e.g. ``regularization, name``) where 1.8 put
    ``parameter_list`` first. A parameter_list is None or a list; any other value there (a
    regularizer, a bool, a name), or a None followed by values 1.8's slots cannot hold, can
    only be 1.6's, so those arguments are passed by their 1.6 names. A tail name starting
    with ``-`` was dropped by 1.8: only None is taken."""

    def deco(cls):
        init = cls.__init__
        names18 = list(inspect.signature(init).parameters)[1:]
        at = names18.index("parameter_list")

        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            if len(args) > at and (_is_16_value(args[at]) or not _fits_18(names18, args, at)):
                if len(args) - at > len(tail):
                    raise ProgramError(f"{cls.__name__}: too many positional arguments for "
                                       f"Paddle 1.6's order (... {', '.join(tail)})")
                for name, value in zip(tail, args[at:]):
                    if name.startswith("-"):
                        if value is not None:
                            raise ProgramError(
                                f"{cls.__name__}: Paddle 1.6's {name[1:]} is gone in 1.8 "
                                "(and graphc); pass grad_clip=GradientClipByNorm(...)")
                        continue
                    if name in kwargs:
                        raise ProgramError(f"{cls.__name__}: got {name} twice (by position, "
                                           "in Paddle 1.6's order, and by keyword)")
                    kwargs[name] = value
                args = args[:at]
            init(self, *args, **kwargs)

        cls.__init__ = __init__
        return cls

    return deco


def _fits_18(names18, args, at) -> bool:
    """Whether positional ``args`` from ``at`` read as 1.8's: a regularizer or clip slot never
    holds a name or a number (1.6's name, lazy_mode, initial_accumulator_value there)."""
    return not any(n in ("regularization", "grad_clip") and isinstance(v, str | int | float)
                   for n, v in zip(names18[at:], args[at:]))


def _is_16_value(value) -> bool:
    return value is not None and (isinstance(value, str | bool) or
                                  not hasattr(value, "__iter__"))


class Optimizer:
    """Base class. ``learning_rate`` is a float or a Variable (e.g. from an LR scheduler)."""

    type = ""

    def __init__(self, learning_rate, parameter_list=None, regularization=None, grad_clip=None,
                 name=None):
        if not isinstance(learning_rate, float | int | Variable) or isinstance(learning_rate,
                                                                                bool):
            raise ProgramError(f"{type(self).__name__}: learning_rate must be a float or a "
                               f"Variable, got {learning_rate!r}")
        if isinstance(learning_rate, float | int) and learning_rate < 0:
            raise ProgramError(f"{type(self).__name__}: learning_rate must be >= 0")
        self._learning_rate = learning_rate
        self.regularization = regularization
        self._name = name
        # Paddle 1.8's grad_clip= (a GradientClip* object; build/clip.py applies it) and
        # parameter_list= (what minimize updates when it is given none)
        self._grad_clip = grad_clip
        self._parameter_list = _parameter_list(self, parameter_list)
        self._lr_var: Variable | None = None
        # Paddle's layout, which its unit tests and scripts read: {accumulator name (the
        # class's _*_acc_str): {parameter name: Variable}}
        self._accumulators: dict[str, dict[str, Variable]] = {}
        self._opti_name_list: list[str] = []  # Paddle's get_opti_var_name_list()

    # -- state -----------------------------------------------------------------------
    def _global_var(self, block, startup, name: str, shape, dtype, value: float) -> Variable:
        var = block.create_var(name, shape, dtype, persistable=True, stop_gradient=True)
        if name not in self._opti_name_list:
            self._opti_name_list.append(name)
        sblock = startup.global_block()
        if name not in sblock.vars:
            svar = sblock.create_var(name, shape, dtype, persistable=True)
            # one per accumulator (thousands): a complete, valid op, appended unchecked
            sblock._append_trusted("fill_constant", {}, {"Out": [svar.name]},
                                   {"shape": [int(d) for d in shape], "dtype": svar.dtype,
                                    "value": float(value), "force_cpu": False},
                                   startup._source or user_source())
        return var

    def _create_lr(self, block, startup) -> Variable:
        if isinstance(self._learning_rate, Variable):
            return self._learning_rate
        if self._lr_var is None or self._lr_var.block is not block:
            self._lr_var = self._global_var(block, startup, unique_name.generate("learning_rate"),
                                            [1], "float32", float(self._learning_rate))
        return self._lr_var

    def _global_learning_rate(self, program=None) -> Variable | None:
        """Paddle's accessor (PaddleCV fetches it to log the LR): the learning-rate Variable
        of ``program`` (default: the main program); None before minimize made one."""
        if isinstance(self._learning_rate, Variable):
            return self._learning_rate
        if self._lr_var is None:
            return None
        if program is not None and self._lr_var.block.program is not program:
            return None
        return self._lr_var

    def _param_lr(self, block, param: Parameter, lr: Variable) -> Variable:
        factor = param.optimize_attr.get("learning_rate", 1.0)
        if factor == 1.0:
            return lr
        scaled = block.create_var(unique_name.generate(f"{param.name}_lr"), [1], lr.dtype,
                                  stop_gradient=True)
        block.append_op("scale", {"X": lr}, {"Out": scaled}, {"scale": factor})
        return scaled

    def _add_accumulator(self, block, startup, name: str, param: Parameter, value: float = 0.0,
                         shape=None) -> Variable:
        per_param = self._accumulators.setdefault(name, {})
        if param.name not in per_param:
            var_name = unique_name.generate(f"{param.name}_{name}")
            per_param[param.name] = self._global_var(
                block, startup, var_name, shape or list(param.shape), param.dtype, value)
        return per_param[param.name]

    def get_accumulator(self, name: str, param) -> Variable:
        return self._accumulators[name][getattr(param, "name", param)]

    def get_opti_var_name_list(self) -> list[str]:
        """The names of the variables this optimizer created (learning rate, accumulators)."""
        return list(self._opti_name_list)

    def state_dict(self, scope=None) -> dict:
        """{accumulator name (Paddle's, e.g. ``fc_0.w_0_moment1_0``): its value} read from
        ``scope`` (default: the global scope); names not yet initialised are left out."""
        scope = _scope(scope)
        names = [v.name for acc in self._accumulators.values() for v in acc.values()]
        if self._lr_var is not None:
            names.append(self._lr_var.name)
        return {n: scope[n] for n in names if n in scope}

    def set_dict(self, state_dict, scope=None) -> None:
        """Write ``state_dict`` (``state_dict()``'s form) back into ``scope`` (default: the
        global scope); a name this optimizer does not own is an error."""
        own = {v.name: v for acc in self._accumulators.values() for v in acc.values()}
        if self._lr_var is not None:
            own[self._lr_var.name] = self._lr_var
        scope = _scope(scope)
        for name, value in state_dict.items():
            var = own.get(name)
            if var is None:
                raise ProgramError(f"{type(self).__name__}.set_dict: '{name}' is not one of "
                                   f"this optimizer's variables ({sorted(own)})")
            value = np.asarray(value, dtype=var.dtype)
            if list(value.shape) != [int(d) for d in var.shape]:
                raise ProgramError(f"{type(self).__name__}.set_dict: '{name}' has shape "
                                   f"{list(var.shape)}, got {list(value.shape)}")
            scope[name] = value

    # -- building ----------------------------------------------------------------------
    def backward(self, loss, startup_program=None, parameter_list=None, no_grad_set=None,
                 callbacks=None):
        """[(parameter, gradient)] for ``loss`` (``callbacks(block, op)`` after each grad op)."""
        if parameter_list is None:
            parameter_list = self._parameter_list
        return append_backward(loss, parameter_list, no_grad_set, callbacks)

    def apply_optimize(self, loss, startup_program, params_grads):
        """The update ops for ``params_grads`` (Paddle's second half of ``minimize``)."""
        return self.apply_gradients(params_grads, startup_program)

    def apply_gradients(self, params_grads, startup_program=None, grad_clip=None):
        if not params_grads:
            return []
        block = params_grads[0][0].block
        program = block.program
        startup = startup_program or default_startup_program()
        ops = []
        where = user_source()  # the user's minimize/apply_gradients line, for every new op
        with program.op_role_guard("optimize"), program.source_guard(where), \
                startup.source_guard(where):
            # Paddle 1.8's order: clip (grad_clip, else set_gradient_clip's), then regularise
            from ..clip import append_gradient_clip_ops
            params_grads = append_gradient_clip_ops(
                params_grads, grad_clip if grad_clip is not None else getattr(self, "_grad_clip",
                                                                              None))
            params_grads = append_regularization_ops(params_grads, self.regularization)
            # Paddle initialises the accumulators before the learning rate: the startup
            # program's learning-rate fill_constant goes last (Paddle's tests index it)
            sblock = startup.global_block()
            mark = len(sblock.ops)
            lr = self._create_lr(block, startup)
            lr_init = sblock.ops[mark:]
            del sblock.ops[mark:]
            start = len(block.ops)
            for param, grad in params_grads:
                self._append_update(block, startup, param, grad,
                                    self._param_lr(block, param, lr))
            sblock.ops.extend(lr_init)
            startup._bump()
            block.program._bump()
            # Paddle returns every op of the optimisation pass: a parameter's own
            # learning-rate scale, then its update op
            ops = block.ops[start:]
        return ops

    @gc_paused
    def minimize(self, loss, startup_program=None, parameter_list=None, no_grad_set=None,
                 grad_clip=None):
        """Returns (optimize ops, [(parameter, gradient)]); ``grad_clip`` overrides the
        optimizer's own for this call."""
        params_grads = self.backward(loss, startup_program, parameter_list, no_grad_set)
        return self.apply_gradients(params_grads, startup_program, grad_clip), params_grads

    def _append_update(self, block, startup, param, grad, lr):
        raise NotImplementedError


class SGD(Optimizer):
    type = "sgd"

    def _append_update(self, block, startup, param, grad, lr):
        return block.append_op("sgd", {"Param": param, "Grad": grad, "LearningRate": lr},
                               {"ParamOut": param})


class Momentum(Optimizer):
    """velocity = mu * velocity + grad; param -= lr * velocity (or the Nesterov form)."""

    type = "momentum"

    _velocity_acc_str = "velocity"

    def __init__(self, learning_rate, momentum: float, parameter_list=None,
                 use_nesterov: bool = False, regularization=None, grad_clip=None, name=None):
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._momentum, self._use_nesterov = float(momentum), bool(use_nesterov)

    def _append_update(self, block, startup, param, grad, lr):
        v = self._add_accumulator(block, startup, "velocity", param)
        return block.append_op(
            "momentum", {"Param": param, "Grad": grad, "Velocity": v, "LearningRate": lr},
            {"ParamOut": param, "VelocityOut": v},
            {"mu": self._momentum, "use_nesterov": self._use_nesterov})


class Adam(Optimizer):
    type = "adam"

    _moment1_acc_str = "moment1"
    _moment2_acc_str = "moment2"
    _beta1_pow_acc_str = "beta1_pow_acc"
    _beta2_pow_acc_str = "beta2_pow_acc"

    def __init__(self, learning_rate=0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, parameter_list=None, regularization=None,
                 grad_clip=None, name=None, lazy_mode: bool = False):
        super().__init__(learning_rate, parameter_list, regularization, grad_clip, name)
        self._beta1, self._beta2, self._epsilon = float(beta1), float(beta2), float(epsilon)
        self._lazy_mode = lazy_mode

    def _attrs(self, param) -> dict:
        return {"beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon,
                "lazy_mode": self._lazy_mode}

    def _append_update(self, block, startup, param, grad, lr):
        m1 = self._add_accumulator(block, startup, "moment1", param)
        m2 = self._add_accumulator(block, startup, "moment2", param)
        b1 = self._add_accumulator(block, startup, "beta1_pow_acc", param, self._beta1, [1])
        b2 = self._add_accumulator(block, startup, "beta2_pow_acc", param, self._beta2, [1])
        return block.append_op(
            self.type,
            {"Param": param, "Grad": grad, "LearningRate": lr, "Moment1": m1, "Moment2": m2,
             "Beta1Pow": b1, "Beta2Pow": b2},
            {"ParamOut": param, "Moment1Out": m1, "Moment2Out": m2, "Beta1PowOut": b1,
             "Beta2PowOut": b2}, self._attrs(param))


class AdamW(Adam):
    """Adam with decoupled weight decay (``param *= 1 - lr * weight_decay`` first).

    ``apply_decay_param_fun(name) -> bool`` picks the parameters that decay (default: all).
    """

    type = "adamw"

    def __init__(self, learning_rate=0.001, beta1: float = 0.9, beta2: float = 0.999,
                 epsilon: float = 1e-8, weight_decay: float = 0.01,
                 apply_decay_param_fun=None, name=None, lazy_mode: bool = False,
                 grad_clip=None, parameter_list=None):
        super().__init__(learning_rate, beta1, beta2, epsilon, parameter_list, None, grad_clip,
                         name, lazy_mode)
        self._coeff, self._decay_fun = float(weight_decay), apply_decay_param_fun

    def _attrs(self, param) -> dict:
        decay = self._decay_fun is None or bool(self._decay_fun(param.name))
        return {**super()._attrs(param), "coeff": self._coeff, "with_decay": decay}


# Paddle's long names
SGDOptimizer, MomentumOptimizer, AdamOptimizer, AdamWOptimizer = SGD, Momentum, Adam, AdamW
__all__ = ["SGD", "Momentum", "Adam", "AdamW", "Optimizer", "L2Decay", "SGDOptimizer",
           "MomentumOptimizer", "AdamOptimizer", "AdamWOptimizer"]
