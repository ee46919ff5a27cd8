"""``fluid.transpiler.ps_dispatcher``: how blocks are placed on parameter servers (RoundRobin,
HashName). HashName hashes with crc32, so every process and run agrees (Paddle's uses
Python's per-process salted ``hash`` and fails on ``var.name()``)."""

from __future__ import annotations

import zlib


class PSDispatcher:
    """Places variables (anything with a ``name``, or names) on ``pserver_endpoints``."""

    method = ""

    def __init__(self, pserver_endpoints):
        self._eps = list(pserver_endpoints)
        self._step = 0

    @property
    def eps(self):
        return self._eps

    def reset(self) -> None:
        self._step = 0

    def dispatch(self, varlist) -> list[str]:
        raise NotImplementedError


def _name(var) -> str:
    return var if isinstance(var, str) else var.name


class RoundRobin(PSDispatcher):
    """The k-th variable goes to endpoint k mod #servers (counting since ``reset``)."""

    method = "round_robin"

    def dispatch(self, varlist) -> list[str]:
        out = []
        for _ in varlist:
            out.append(self._eps[self._step % len(self._eps)])
            self._step += 1
        return out


class HashName(PSDispatcher):
    """A variable goes to endpoint crc32(name) mod #servers."""

    method = "hash_name"

    def dispatch(self, varlist) -> list[str]:
        return [self._eps[zlib.crc32(_name(v).encode()) % len(self._eps)] for v in varlist]
