"""Op definitions: importing this package registers every op type graphc knows.

``get_op_def(type)`` is the one way to ask what an op takes, produces and promises.
"""

import importlib
import pkgutil

from . import math_ops, nn_ops, optimizer_ops, tensor_ops  # noqa: F401  (registration)
from .grad_ops import GRAD_SUFFIX, forward_type, grad_op_type, is_differentiable, register_grad_ops
from .registry import (
    ACTIVATION,
    COLLECTIVE,
    CONTROL_SLOT,
    ELEMENTWISE,
    INITIALIZER,
    LOSS,
    NO_GRAD,
    OPTIMIZER,
    RANDOM,
    REQUIRED,
    STATEFUL,
    WHOLE_TENSOR,
    AttrDef,
    InferContext,
    OpDef,
    SlotDef,
    all_op_types,
    get_op_def,
    has_op_def,
    register,
)

_CORE = {"math_ops", "nn_ops", "optimizer_ops", "tensor_ops", "grad_ops"}
# Op families beyond the core ones (fused ops, ...) live in modules named *_ops.py here.
for _module in pkgutil.iter_modules(__path__):
    if _module.name.endswith("_ops") and _module.name not in _CORE:
        importlib.import_module(f"{__name__}.{_module.name}")
register_grad_ops()  # after every forward op is known

__all__ = [
    "CONTROL_SLOT",
    "GRAD_SUFFIX", "forward_type", "grad_op_type", "is_differentiable", "register_grad_ops",
    "ACTIVATION", "COLLECTIVE", "ELEMENTWISE", "INITIALIZER", "LOSS", "NO_GRAD", "OPTIMIZER",
    "RANDOM", "REQUIRED", "STATEFUL", "WHOLE_TENSOR", "AttrDef", "InferContext", "OpDef",
    "SlotDef",
    "all_op_types", "get_op_def", "has_op_def", "register",
]
