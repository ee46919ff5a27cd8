"""Op definitions: importing this package registers every op type graphc knows.

``get_op_def(type)`` is the one way to ask what an op takes, produces and promises.
"""

from . import math_ops, nn_ops, tensor_ops  # noqa: F401  (registration side effects)
from .registry import (
    ACTIVATION,
    COLLECTIVE,
    ELEMENTWISE,
    INITIALIZER,
    LOSS,
    NO_GRAD,
    OPTIMIZER,
    RANDOM,
    REQUIRED,
    STATEFUL,
    AttrDef,
    InferContext,
    OpDef,
    SlotDef,
    all_op_types,
    get_op_def,
    has_op_def,
    register,
)

__all__ = [
    "ACTIVATION", "COLLECTIVE", "ELEMENTWISE", "INITIALIZER", "LOSS", "NO_GRAD", "OPTIMIZER",
    "RANDOM", "REQUIRED", "STATEFUL", "AttrDef", "InferContext", "OpDef", "SlotDef",
    "all_op_types", "get_op_def", "has_op_def", "register",
]
