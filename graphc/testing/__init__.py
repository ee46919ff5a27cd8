"""Test helpers shared by graphc's own suites and by pass authors: hypothesis strategies
for random valid programs and their lowered graphs."""

from .check import assert_same_results, check_pass, feeds_for
from .golden import check_golden
from .programs import STEP_NAMES, GeneratedProgram, random_graphs, random_programs

__all__ = [
    "GeneratedProgram", "STEP_NAMES", "assert_same_results", "check_golden", "check_pass",
    "feeds_for", "random_graphs", "random_programs",
]
