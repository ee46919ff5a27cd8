"""The default programs Fluid's layer functions build into (``default_main_program()``) and
``program_guard``, which swaps them for a ``with`` block: Paddle's process-wide builder state."""

from __future__ import annotations

import contextlib

from .errors import ProgramError
from .program import Program

# process: Paddle's default_main_program
_main_program = Program()
# process: Paddle's default_startup_program
_startup_program = Program()


def default_main_program() -> Program:
    return _main_program


def default_startup_program() -> Program:
    return _startup_program


def switch_main_program(program: Program) -> Program:
    global _main_program
    old, _main_program = _main_program, program
    return old


def switch_startup_program(program: Program) -> Program:
    global _startup_program
    old, _startup_program = _startup_program, program
    return old


@contextlib.contextmanager
def program_guard(main_program: Program, startup_program: Program | None = None):
    """Layers called inside build into ``main_program`` (and ``startup_program``)."""
    if not isinstance(main_program, Program):
        raise ProgramError(f"program_guard expects a Program, got {type(main_program).__name__}")
    if startup_program is not None and not isinstance(startup_program, Program):
        raise ProgramError("program_guard's startup_program must be a Program, got "
                           f"{type(startup_program).__name__}")
    old_main = switch_main_program(main_program)
    old_startup = switch_startup_program(startup_program) if startup_program else None
    try:
        yield
    finally:
        switch_main_program(old_main)
        if old_startup is not None:
            switch_startup_program(old_startup)
