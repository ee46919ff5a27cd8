"""Graph passes, one per module, registered by kebab-case name; the PassManager that runs
them; and ``pipeline_for(build_strategy)``, the ordered pipeline a BuildStrategy asks for."""

from . import backward_optimizer_op_deps, dce, sequential_execution  # noqa: F401 (register)
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

__all__ = [
    "ORDER", "Pass", "PassContext", "PassError", "PassFailure", "PassManager", "PassResult",
    "PipelineReport", "all_passes", "make_pass", "parse_pipeline", "passes_for",
    "pipeline_for", "register_pass",
]
