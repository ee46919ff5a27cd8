"""Where the user created an op: the first stack frame outside the graphc package.

Kept as ``path:line`` (relative to the working directory when under it).
"""

from __future__ import annotations

import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# cache: display name per source file name
_display: dict[str, str | None] = {}


def _display_name(filename: str) -> str | None:
    """None for frames inside graphc itself (graphc/testing counts as user code)."""
    name = _display.get(filename)
    if name is None and filename not in _display:
        path = os.path.abspath(filename)
        inside = path.startswith(_PACKAGE_DIR) and not path.startswith(
            _PACKAGE_DIR + "testing" + os.sep)
        if inside:
            name = None
        else:
            try:
                rel = os.path.relpath(path)
                name = path if rel.startswith("..") else rel
            except ValueError:
                name = path
        _display[filename] = name
    return name


def user_source() -> str | None:
    """``file:line`` of the innermost caller outside graphc, or None."""
    frame = sys._getframe(1)
    while frame is not None:
        name = _display_name(frame.f_code.co_filename)
        if name is not None:
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return None
