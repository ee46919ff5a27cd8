"""Graph passes, one per module, registered by kebab-case name; the PassManager that runs
them; ``pipeline_for(build_strategy)``, the ordered pipeline a BuildStrategy asks for; and
the pattern layer local rewrites are written in (Pattern, Node, guards, run_patterns)."""

import importlib
import pkgutil

from .infra import guards
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
from .infra.driver import Driver, PatternStats, run_patterns
from .infra.example import pattern_from_example
from .infra.manager import PassFailure, PassManager, PipelineReport
from .infra.pattern import Extension, Match, Node, Pattern
from .infra.pipeline import ORDER, passes_for, pipeline_for

# Every module here and in the pass sub-packages (pserver/, roll/) is one pass or a helper
# of those passes: importing it registers what it defines. infra/ holds no pass.
for _module in pkgutil.walk_packages(__path__, prefix=f"{__name__}."):
    if not _module.name.startswith(f"{__name__}.infra"):
        importlib.import_module(_module.name)

__all__ = [
    "ORDER", "Driver", "Extension", "Match", "Node", "Pass", "PassContext", "PassError",
    "PassFailure", "PassManager", "PassResult", "Pattern", "PatternStats", "PipelineReport",
    "all_passes", "guards", "make_pass", "parse_pipeline", "passes_for",
    "pattern_from_example", "pipeline_for", "register_pass", "run_patterns",
]
