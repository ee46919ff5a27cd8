"""The porting rule of docs/porting_from_paddle.md applied textually to Paddle-spelled source,
and a runner for the ported scripts (tests/test_porting_rule.py, tests/test_book_*.py)."""

from __future__ import annotations

import re
from pathlib import Path

BOOK_PROGRAMS = Path(__file__).resolve().parent / "book_programs"

_IMPORT = re.compile(r"^\s*(import|from)\s+paddle\b")


def port(script: str) -> str:
    """The documented rule, textually: only import lines change; ``paddle`` becomes
    ``graphc`` there, and a bare ``import paddle`` becomes ``import graphc as paddle``."""
    lines = []
    for line in script.splitlines():
        if _IMPORT.match(line):
            if re.fullmatch(r"\s*import\s+paddle\s*", line):
                line = line.replace("import paddle", "import graphc as paddle")
            elif re.fullmatch(r"\s*import\s+paddle(\.\w+)+\s*", line):
                # `import paddle.fluid.core` binds `paddle`; the ported line binds it too
                # (the docs' "add `import graphc as paddle`"), on the same line
                line = re.sub(r"\bpaddle\b", "graphc", line) + "; import graphc as paddle"
            elif " as " in line:
                # the module changes, the name it is bound to stays (`import paddle as
                # paddle`, book chapter 04, keeps binding `paddle`)
                module, alias = line.split(" as ", 1)
                line = re.sub(r"\bpaddle\b", "graphc", module) + " as " + alias
            else:
                line = re.sub(r"\bpaddle\b", "graphc", line)
        lines.append(line)
    return "\n".join(lines) + "\n"


def run_ported(script: str, name: str, data: dict[str, str] | None = None,
               inject: dict | None = None) -> dict:
    """Port ``script`` and execute it as a module named ``name``; return its namespace.

    ``data`` replaces dataset expressions (``paddle.dataset.cifar.train10()``) by synthetic
    ones, the only change besides the rule, since tests never download; ``inject`` puts the
    names those expressions use (a synthetic reader) into the script's globals."""
    for paddle_expr, synthetic in (data or {}).items():
        assert paddle_expr in script, f"{name} does not use {paddle_expr}"
        script = script.replace(paddle_expr, synthetic)
    ported = port(script)
    left = [ln for ln in ported.splitlines() if _IMPORT.match(ln)]
    assert not left, f"{name}: still imports paddle after porting: {left}"
    namespace = {"__name__": name, **(inject or {})}
    exec(compile(ported, f"<{name}>", "exec"), namespace)
    return namespace


def book_program(name: str) -> str:
    """The Paddle-spelled source of ``tests/book_programs/<name>.py``."""
    return (BOOK_PROGRAMS / f"{name}.py").read_text()


def run_book_program(name: str, data: dict[str, str] | None = None,
                     inject: dict | None = None) -> dict:
    """Port and run a book program kept under tests/book_programs/."""
    return run_ported(book_program(name), name, data=data, inject=inject)
