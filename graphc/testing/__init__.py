"""Test helpers shared by graphc's own suites and by pass authors: hypothesis strategies
for random valid programs and their lowered graphs."""

from .programs import STEP_NAMES, GeneratedProgram, random_graphs, random_programs

__all__ = ["STEP_NAMES", "GeneratedProgram", "random_graphs", "random_programs"]
