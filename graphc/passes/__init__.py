"""Graph passes, one per module, registered by kebab-case name; the PassManager that runs
them; and ``pipeline_for(build_strategy)``, the ordered pipeline a BuildStrategy asks for."""

import importlib
import pkgutil

from .infra.base import (
    Pass,
    PassContext,
    PassError,
    PassResult,
    all_passes,
    make_pass,
    parse_pipeline,
    register_pass,
)
from .infra.manager import PassFailure, PassManager, PipelineReport
from .infra.pipeline import ORDER, passes_for, pipeline_for

# Every module here and in the pass sub-packages (pserver/, roll/) is one pass or a helper
# of those passes: importing it registers what it defines. infra/ holds no pass.
for _module in pkgutil.walk_packages(__path__, prefix=f"{__name__}."):
    if not _module.name.startswith(f"{__name__}.infra"):
        importlib.import_module(_module.name)

__all__ = [
    "ORDER", "Pass", "PassContext", "PassError", "PassFailure", "PassManager", "PassResult",
    "PipelineReport", "all_passes", "make_pass", "parse_pipeline", "passes_for",
    "pipeline_for", "register_pass",
]
