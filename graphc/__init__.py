"""graphc: build Paddle-Fluid-style programs, lower them to an SSA IR, rewrite them with
passes chosen by a BuildStrategy, and run them on JAX/XLA."""

from . import initializer, layers
from .ir import (
    Block,
    Graph,
    GraphcError,
    OpDefinitionError,
    Operator,
    Parameter,
    ParseError,
    Program,
    ProgramError,
    ShapeError,
    TensorType,
    UnknownOpError,
    Variable,
    VerifyError,
    default_main_program,
    default_startup_program,
    lower,
    parse,
    program_guard,
    unique_name,
    verify,
)
from .layers import data
from .param_attr import ParamAttr

__version__ = "0.1.0"

__all__ = [
    "Block", "GraphcError", "Graph", "OpDefinitionError", "Operator", "ParamAttr", "Parameter",
    "ParseError", "Program", "ProgramError", "ShapeError", "TensorType", "UnknownOpError",
    "Variable", "VerifyError", "data", "default_main_program", "default_startup_program",
    "initializer", "layers", "lower", "parse", "program_guard", "unique_name", "verify",
]
