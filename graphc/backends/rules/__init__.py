"""Lowering rules by op type; importing this package registers them all.

``apply_rule`` is the single entry point both the interpreter and the JAX emitter use.
"""

import importlib
import pkgutil

from .registry import (
    LoweringError,
    Replicas,
    RuleContext,
    apply_cross_replica,
    apply_rule,
    get_rule,
    has_rule,
    is_cross_replica,
    lowering,
    stable_seed,
)

# Every module here except the registry holds rules for one family of ops (registering them).
for _module in pkgutil.iter_modules(__path__):
    if _module.name != "registry":
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["LoweringError", "Replicas", "RuleContext", "apply_cross_replica", "apply_rule",
           "get_rule", "has_rule", "is_cross_replica", "lowering", "stable_seed"]
