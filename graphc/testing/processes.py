"""Which processes are still running, for tests of multi-process jobs that must leave nothing
behind (graphc launch, parameter-server jobs): read from /proc, no dependency."""

from __future__ import annotations

import os
from pathlib import Path


def job_processes(marker: str) -> list[tuple[int, str]]:
    """(pid, command line) of every process but this one whose command line holds
    ``marker`` (Linux: empty where /proc is absent)."""
    found = []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline:
            found.append((int(entry.name), cmdline))
    return found
