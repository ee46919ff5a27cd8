"""Golden IR files for pass tests: compare printed IR with ``tests/golden/...`` and rewrite
the expectation instead when ``GRAPHC_UPDATE_GOLDEN=1`` (after a deliberate change)."""

from __future__ import annotations

import difflib
import os
from pathlib import Path

UPDATE_ENV = "GRAPHC_UPDATE_GOLDEN"


def check_golden(path: str | os.PathLike, actual: str) -> None:
    """Assert ``actual`` equals the file's text; with GRAPHC_UPDATE_GOLDEN=1, write it."""
    path = Path(path)
    if os.environ.get(UPDATE_ENV) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual)
        return
    if not path.exists():
        raise AssertionError(f"no golden file {path}; run with {UPDATE_ENV}=1 to create it")
    expected = path.read_text()
    if expected != actual:
        diff = "\n".join(difflib.unified_diff(expected.splitlines(), actual.splitlines(),
                                              f"{path} (expected)", "actual", lineterm=""))
        raise AssertionError(f"IR differs from {path} (set {UPDATE_ENV}=1 to accept):\n{diff}")
