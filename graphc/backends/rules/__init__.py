"""Lowering rules by op type; importing this package registers them all.

``apply_rule`` is the single entry point both the interpreter and the JAX emitter use.
"""

from . import grads, math, nn, optim, tensor  # noqa: F401  (registration side effects)
from .registry import (
    LoweringError,
    RuleContext,
    apply_rule,
    get_rule,
    has_rule,
    lowering,
    stable_seed,
)

__all__ = ["LoweringError", "RuleContext", "apply_rule", "get_rule", "has_rule", "lowering",
           "stable_seed"]
