"""What a program is: the Program builder, op definitions, the SSA graph, text and verifier.

This package imports nothing else of graphc; everything else builds on it.
"""

from . import unique_name
from .default_programs import default_main_program, default_startup_program, program_guard
from .errors import (
    GraphcError,
    OpDefinitionError,
    ParseError,
    ProgramError,
    ShapeError,
    UnknownOpError,
    VerifyError,
)
from .graph import Graph, Op, Value, VarInfo, lower
from .program import Block, Operator, Parameter, Program, Variable
from .rewriter import Rewriter
from .text import parse
from .types import TensorType
from .verify import verify

__all__ = [
    "Block", "GraphcError", "Graph", "Op", "OpDefinitionError", "Operator", "Parameter",
    "ParseError", "Program", "ProgramError", "Rewriter", "ShapeError", "TensorType",
    "UnknownOpError", "Value", "VarInfo", "Variable", "VerifyError", "default_main_program",
    "default_startup_program", "lower", "parse", "program_guard", "unique_name", "verify",
]
