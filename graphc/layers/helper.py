"""LayerHelper: what every layer function shares (names, parameters, temporaries, ops).

Parameters live in the main program; their initialiser ops go to the startup program.
"""

from __future__ import annotations

import copy

from ..build.initializer import Constant, Initializer, Xavier
from ..build.param_attr import ParamAttr, WeightNormParamAttr
from ..ir import unique_name
from ..ir.default_programs import default_main_program, default_startup_program
from ..ir.errors import ArgumentDtypeError, ArgumentTypeError, DtypeError, ProgramError
from ..ir.program import Variable
from ..ir.types import normalize_dtype


class LayerHelper:
    def __init__(self, layer_type: str, name: str | None = None, **kwargs):
        self.layer_type = layer_type
        self.name = name or unique_name.generate(layer_type)
        self.main_program = default_main_program()
        self.startup_program = default_startup_program()
        # Paddle's helper keeps the layer's keyword arguments: scripts that build their own
        # layers read ``helper.param_attr`` / ``bias_attr`` / ``kwargs`` back from it
        self.kwargs = dict(kwargs, name=name)

    @property
    def param_attr(self):
        return ParamAttr.to_attr(self.kwargs.get("param_attr"))

    @property
    def bias_attr(self):
        return ParamAttr.to_attr(self.kwargs.get("bias_attr"))

    @property
    def block(self):
        return self.main_program.current_block()

    def create_parameter(self, attr, shape, dtype="float32", is_bias: bool = False,
                         default_initializer: Initializer | None = None):
        attr = ParamAttr.to_attr(attr)
        if attr is False:
            return None
        attr = copy.copy(attr)
        shape = [int(d) for d in shape]
        if any(d <= 0 for d in shape):
            raise ProgramError(f"{self.layer_type}: parameter shape {shape} must be positive")
        name = attr.name or unique_name.generate(f"{self.name}.{'b' if is_bias else 'w'}")
        init = attr.initializer or default_initializer or (Constant(0.0) if is_bias else Xavier())
        dtype = normalize_dtype(dtype)
        if isinstance(attr, WeightNormParamAttr):
            from ..build.weight_norm import weight_normalized
            return weight_normalized(self, attr, name, shape, dtype, init)
        return self._parameter(attr, name, shape, dtype, init)

    def _parameter(self, attr, name: str, shape: list, dtype: str, init: Initializer):
        """The parameter ``name`` in the main program, initialised by ``init`` in startup."""
        param = self.main_program.global_block().create_parameter(
            name, shape, dtype, trainable=attr.trainable, learning_rate=attr.learning_rate,
            regularizer=attr.regularizer, need_clip=attr.need_clip)
        if param.initializer is None:  # recorded only: the startup program fills it (below)
            param.initializer = init
        attr._set_on(param)  # Paddle 1.8's gradient_clip / do_model_average
        startup = self.startup_program.global_block()
        if name not in startup.vars:
            svar = startup.create_var(name, shape, dtype, persistable=True)
            init(svar, startup)
        elif list(startup.vars[name].shape or ()) != shape:
            # a parameter shared by name (or another program on this startup) that the
            # startup program initialises with another shape: it could never be loaded
            raise ProgramError(f"parameter '{name}' has shape {shape} here but the startup "
                               f"program initialises it with {list(startup.vars[name].shape)}")
        # otherwise the parameter is shared by name: its first definition initialised it
        return param

    def create_variable_for_type_inference(self, dtype="float32",
                                           stop_gradient: bool = False) -> Variable:
        """A temporary named ``<layer>.tmp_N``; its shape comes from the op that writes it."""
        return self.block.create_var(unique_name.generate(f"{self.name}.tmp"), None, dtype,
                                     stop_gradient=stop_gradient)

    def append_op(self, *args, **kwargs):
        return self.block.append_op(*args, **kwargs)

    def append_bias_op(self, x: Variable, bias_attr, dim_start: int = 1, dim_end=None):
        size = list(x.shape[dim_start:dim_end])
        b = self.create_parameter(bias_attr, size, x.dtype, is_bias=True)
        if b is None:
            return x
        out = self.create_variable_for_type_inference(x.dtype)
        self.append_op("elementwise_add", {"X": x, "Y": b}, {"Out": out}, {"axis": dim_start})
        return out

    def append_activation(self, x: Variable, act) -> Variable:
        if act is None:
            return x
        attrs = {}
        if isinstance(act, dict):
            attrs = {k: v for k, v in act.items() if k != "type"}
            act = act["type"]
        out = self.create_variable_for_type_inference(x.dtype)
        self.append_op(act, {"X": x}, {"Out": out}, attrs)
        return out


def check_variable(layer: str, arg: str, value, written: bool = False) -> Variable:
    """``value`` is a Variable with a shape; ``written`` (an ``out=`` the layer writes, e.g. a
    ``create_tensor``): no shape needed, the op gives it one, as in Paddle."""
    if not isinstance(value, Variable):
        raise ArgumentTypeError(f"{layer}: '{arg}' must be a Variable, got "
                                f"{type(value).__name__}")
    if value.shape is None and not written:
        raise ProgramError(f"{layer}: '{arg}' ({value.name}) has no shape yet")
    return value


# Paddle 1.8's dtype lists for its layers' check_variable_and_dtype / check_dtype calls
FLOATS = ("float16", "float32", "float64")
NUMERIC = ("float16", "float32", "float64", "int32", "int64")


def check_dtype(layer: str, arg: str, value, dtypes, written: bool = False) -> Variable:
    """``check_variable``, then the dtypes Paddle 1.8's layer accepts for ``arg``: another
    dtype is an ArgumentDtypeError (a TypeError, as Paddle's check raises) naming it."""
    check_variable(layer, arg, value, written)
    if value.dtype not in dtypes:
        raise ArgumentDtypeError(f"{layer}: '{arg}' ({value.name}) must be a "
                                f"{'/'.join(dtypes)} tensor, got {value.dtype}")
    return value


def check_dtype_arg(layer: str, arg: str, dtype, dtypes) -> str:
    """A dtype argument (name or numpy dtype) as its canonical name, refused with an
    ArgumentTypeError when Paddle 1.8's layer does not take it (or no one knows it)."""
    try:
        name = normalize_dtype(dtype)
    except DtypeError:
        name = None
    if name not in dtypes:
        raise ArgumentTypeError(f"{layer}: '{arg}' must be one of {', '.join(dtypes)}, got "
                                f"{dtype!r}")
    return name


def check_type(layer: str, arg: str, value, types, expected: str):
    """``value`` is an instance of ``types``, else an ArgumentTypeError saying ``expected``."""
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise ArgumentTypeError(f"{layer}: '{arg}' must be {expected}, got bool")
    if not isinstance(value, types):
        raise ArgumentTypeError(f"{layer}: '{arg}' must be {expected}, got "
                                f"{type(value).__name__}")
    return value
