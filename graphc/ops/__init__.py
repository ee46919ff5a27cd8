"""Every op graphc knows, one folder per family: ``defs.py`` (JAX-free: slots, attributes,
inference, traits, LoD and grad rules) beside ``lowering.py`` (its JAX rules).

Importing this package registers every definition (never JAX); ``import_lowerings()``
registers every family's lowering rules, which the backends call before walking ops.
"""

import importlib
import pkgutil

from ..ir.grad_defs import register_grad_ops
from ..ir.opdef import get_op_def  # noqa: F401  (the one way to ask what an op is)

# The core families first: the others' LoD rules and fused ops refer to their ops.
_CORE = ("math", "nn", "optimizer", "tensor")


def families() -> list[str]:
    """The op families, core first: the sub-packages of this package."""
    others = sorted(m.name for m in pkgutil.iter_modules(__path__)
                    if m.ispkg and m.name not in _CORE)
    return [*_CORE, *others]


def import_lowerings() -> None:
    """Register every family's JAX rules: each module of a family other than ``defs``."""
    for family in families():
        package = importlib.import_module(f"{__name__}.{family}")
        for module in pkgutil.iter_modules(package.__path__):
            if module.name != "defs":
                importlib.import_module(f"{package.__name__}.{module.name}")


for _family in families():
    importlib.import_module(f"{__name__}.{_family}.defs")
register_grad_ops()  # after every forward op is known
