"""The MultiSlot text format Paddle's datasets read: each line holds, per slot, a count and
that many values; lines parse into per-slot samples and samples pack into feed columns."""

from __future__ import annotations

import math
import threading

import numpy as np

from ..ir.errors import GraphcError
from ..ir.program import Variable
from .loader_epoch import _var_dtype


class DatasetError(GraphcError):
    """A dataset is misconfigured, or a data file is missing or malformed."""


class _Slot:
    """How one variable's values appear on a line."""

    def __init__(self, var: Variable):
        shape = tuple(var.shape or ())
        what = "token" if var.lod_level else "batch"
        if not shape or any(d < 0 for d in shape[1:]):
            raise DatasetError(f"variable '{var.name}' has shape {list(shape)}; a dataset "
                               f"slot needs a {what} dimension followed by known dimensions")
        if var.lod_level > 1:
            raise DatasetError(f"variable '{var.name}' has lod_level={var.lod_level}; the "
                               "MultiSlot format holds one sequence per slot (lod_level 0 "
                               "or 1)")
        self.var = var
        self.name = var.name
        self.lod = bool(var.lod_level)
        self.sample_shape = shape[1:]  # of one token, for a LoD slot
        self.size = math.prod(self.sample_shape)
        self.dtype = _var_dtype(var)
        self.parse = int if self.dtype.kind in "biu" else float
        if self.parse is int:
            info = np.iinfo(self.dtype) if self.dtype.kind != "b" else np.iinfo(np.uint8)
            self.low, self.high = int(info.min), int(info.max)


class _Ragged:
    """A LoD slot's column: every sample's tokens back to back, and the token counts."""

    def __init__(self, tokens: np.ndarray, lengths: np.ndarray):
        self.tokens, self.lengths = tokens, lengths

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, index) -> _Ragged:
        ends = np.cumsum(self.lengths)
        if isinstance(index, slice):
            start, stop, _ = index.indices(len(self))
            a = int(ends[start - 1]) if start else 0
            b = int(ends[stop - 1]) if stop > start else a
            return _Ragged(self.tokens[a:b], self.lengths[start:stop])
        lengths = self.lengths[index]
        starts = (ends - self.lengths)[index]
        # token rows of the chosen samples in order: each sample's start plus 0..len-1
        rows = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(
            int(lengths.sum()))
        return _Ragged(self.tokens[rows], lengths)

    def lod_tensor(self):
        from ..runtime.lod import LoDTensor
        return LoDTensor(self.tokens, [self.lengths])


def _concat(parts: list):
    if isinstance(parts[0], _Ragged):
        return _Ragged(np.concatenate([p.tokens for p in parts]),
                       np.concatenate([p.lengths for p in parts]))
    return np.concatenate(parts)


def _batch(columns: list) -> list:
    """A batch as the DataLoader takes it: arrays, and LoDTensors for LoD slots."""
    return [c.lod_tensor() if isinstance(c, _Ragged) else c for c in columns]


def parse_line(line: str, slots: list[_Slot], where: str, prefix: int = 0) -> list | None:
    """One line's values per slot (lists), None for a blank line; ``where`` is file:line.
    ``prefix`` leading fields of the form ``1 <token>`` (Paddle's instance id, content,
    log key) come first and are skipped."""
    tokens = line.split()
    if not tokens:
        return None
    out, pos = [], 0
    for _ in range(prefix):
        if len(tokens) < pos + 2 or tokens[pos] != "1":
            raise DatasetError(f"{where}: expected '1 <id>' before the slots (set_parse_ins_id/"
                               "set_parse_content/set_parse_logkey)")
        pos += 2
    for slot in slots:
        if pos >= len(tokens):
            raise DatasetError(f"{where}: the line ends before variable '{slot.name}' "
                               f"(expected a count, then {slot.size} values)")
        try:
            n = int(tokens[pos])
        except ValueError:
            raise DatasetError(f"{where}: expected the count of variable '{slot.name}', "
                               f"got {tokens[pos]!r}") from None
        if slot.lod and (n <= 0 or n % slot.size):
            raise DatasetError(
                f"{where}: variable '{slot.name}' (lod_level=1) has {n} values; expected a "
                f"positive multiple of {slot.size} (tokens of shape "
                f"{list(slot.sample_shape)})" + ("; pad an empty slot (e.g. with id 0), as "
                                                 "Paddle requires" if n == 0 else ""))
        if not slot.lod and n != slot.size:
            raise DatasetError(f"{where}: variable '{slot.name}' has {n} values, expected "
                               f"{slot.size} (one sample of shape {list(slot.sample_shape)})")
        values = tokens[pos + 1:pos + 1 + n]
        if len(values) != n:
            raise DatasetError(f"{where}: variable '{slot.name}' announces {n} values but the "
                               f"line has only {len(values)} left")
        try:
            parsed = [slot.parse(v) for v in values]
        except ValueError as exc:
            kind = "integer" if slot.parse is int else "number"
            raise DatasetError(f"{where}: variable '{slot.name}': a value is not an {kind} "
                               f"({str(exc)[:120]})") from None
        if slot.parse is int and parsed and not (
                slot.low <= min(parsed) and max(parsed) <= slot.high):
            bad = next(v for v in parsed if not slot.low <= v <= slot.high)
            raise DatasetError(f"{where}: variable '{slot.name}': the id {str(bad)[:40]} does "
                               f"not fit {slot.dtype} ([{slot.low}, {slot.high}])")
        out.append(parsed)
        pos += 1 + n
    if pos != len(tokens):
        raise DatasetError(f"{where}: {len(tokens) - pos} token(s) after the last variable "
                           f"'{slots[-1].name}'")
    return out


def _columns(samples: list[list], slots: list[_Slot]) -> list:
    out = []
    for k, slot in enumerate(slots):
        if slot.lod:
            values = [s[k] for s in samples]
            flat = np.asarray([v for vs in values for v in vs], dtype=slot.dtype)
            lengths = np.asarray([len(vs) // slot.size for vs in values], np.int64)
            out.append(_Ragged(flat.reshape((-1, *slot.sample_shape)), lengths))
        else:
            out.append(np.asarray([s[k] for s in samples], dtype=slot.dtype).reshape(
                (len(samples), *slot.sample_shape)))
    return out


def _open(path: str):
    try:
        return open(path, encoding="utf-8")
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read the data file ({exc.strerror or exc})") from None


def _parsed(lines, slots: list[_Slot], stop, where, prefix: int):
    """The samples of ``lines``, each parse error naming ``where(lineno)``."""
    for lineno, line in enumerate(lines, 1):
        if stop is not None and stop.is_set():
            return
        sample = parse_line(line, slots, where(lineno), prefix)
        if sample is not None:
            yield sample


def _read_lines(path: str, slots: list[_Slot], stop: threading.Event | None = None,
                pipe=None, prefix: int = 0):
    """Parsed samples of ``path`` (or of ``pipe``'s output for it: ``(command, timeout,
    download_cmd)``), in line order."""
    if pipe is not None:
        from .pipe import piped_lines
        command, timeout, download_cmd = pipe
        lines = piped_lines(path, command, timeout, stop, download_cmd)
        where = " | ".join(c for c in (f"{download_cmd} {path}" if download_cmd else path,
                                        command) if c)
        try:
            yield from _parsed(lines, slots, stop, lambda n: f"{where}: output line {n}",
                               prefix)
        finally:
            lines.close()  # stops the command at once if we stopped early
        return
    with _open(path) as f:
        try:
            yield from _parsed(f, slots, stop, lambda n: f"{path}:{n}", prefix)
        except UnicodeDecodeError as exc:
            raise DatasetError(f"{path}: not UTF-8 text ({exc})") from None
