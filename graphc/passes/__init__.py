"""Graph passes, one per module, registered by kebab-case name; the PassManager that runs
them; and ``pipeline_for(build_strategy)``, the ordered pipeline a BuildStrategy asks for."""

import importlib
import pkgutil

from .base import (
    Pass,
    PassContext,
    PassError,
    PassResult,
    all_passes,
    make_pass,
    parse_pipeline,
    register_pass,
)
from .manager import PassFailure, PassManager, PipelineReport
from .pipeline import ORDER, passes_for, pipeline_for

# Every other module of this package is one pass: importing it registers the pass.
_INFRASTRUCTURE = {"base", "manager", "pipeline", "control_deps"}
for _module in pkgutil.iter_modules(__path__):
    if _module.name not in _INFRASTRUCTURE:
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "ORDER", "Pass", "PassContext", "PassError", "PassFailure", "PassManager", "PassResult",
    "PipelineReport", "all_passes", "make_pass", "parse_pipeline", "passes_for",
    "pipeline_for", "register_pass",
]
