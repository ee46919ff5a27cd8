"""``fluid.DataFeeder``: turns a reader's minibatch (a list of samples) into a feed dict,
converted to each feed variable's declared dtype and shape."""

from __future__ import annotations

import math
import operator
import os

import numpy as np

from ..ir.program import Program, Variable, default_main_program
from ..runtime.executor import FeedError
from ..runtime.lod import LoDTensor
from ..runtime.places import CUDAPlace

__all__ = ["DataFeeder"]


def _feed_var(item, program: Program) -> Variable:
    if isinstance(item, Variable):
        return item
    if isinstance(item, str):
        block = program.global_block()
        if not block.has_var(item):
            raise FeedError(f"DataFeeder: feed variable '{item}' is not a variable of the "
                            "program (pass the Variables, or the program that declares them)")
        return block.var(item)
    raise FeedError(f"DataFeeder: feed_list entries must be Variables or names, got "
                    f"{type(item).__name__}")


class _Column:
    """Converts one feed variable's values, sample by sample, like Paddle's converter."""

    def __init__(self, var: Variable):
        import jax.numpy as jnp
        self.var, self.name = var, var.name
        self.dtype = np.dtype(jnp.dtype(var.dtype))
        shape = list(var.shape or ())
        # Paddle checks and reshapes only when at most one dimension is unknown (the batch).
        self.shape = shape if sum(d < 0 for d in shape) <= 1 else None

    def convert(self, value, index: int) -> np.ndarray:
        where = f"DataFeeder: feed '{self.name}', sample {index}"
        try:
            arr = np.asarray(value)
        except ValueError as exc:  # ragged nested lists
            raise FeedError(f"{where}: the value is not a rectangular array ({exc}); ragged "
                            "(LoD) samples are not supported yet") from None
        kind, want = arr.dtype.kind, self.dtype.kind
        if kind not in "biuf":
            raise FeedError(f"{where}: cannot convert a {arr.dtype} value to {self.dtype} "
                            f"(got {value!r:.60})")
        out = arr.astype(self.dtype)
        if want in "biu" and kind in "biuf" and arr.size and not np.array_equal(out, arr):
            bad = arr.reshape(-1)[np.flatnonzero(out.reshape(-1) != arr.reshape(-1))[0]]
            raise FeedError(f"{where}: converting {bad.item()!r} to the declared {self.dtype} "
                            "would lose information (a fraction or an out-of-range value)")
        return out

    def batch(self, values: list) -> np.ndarray:
        arrays = [self.convert(v, i) for i, v in enumerate(values)]
        first = arrays[0].shape
        for i, a in enumerate(arrays):
            if a.shape != first:
                raise FeedError(f"DataFeeder: feed '{self.name}': sample {i} has shape "
                                f"{list(a.shape)} but sample 0 has {list(first)}; samples "
                                "of one minibatch must agree (ragged/LoD feeds are not "
                                "supported yet)")
        arr = np.stack(arrays)
        if self.shape is None:
            return arr
        if arr.ndim != len(self.shape):
            per_sample = math.prod(d for d in self.shape if d >= 0)
            if per_sample == 0 or arr.size % per_sample:
                raise FeedError(f"DataFeeder: feed '{self.name}' is declared with shape "
                                f"{self.shape} but its samples have shape {list(first)} "
                                f"({math.prod(first)} values each), which cannot be reshaped "
                                "to it")
            return arr.reshape(self.shape)
        for d_want, d_got in zip(self.shape, arr.shape):
            if d_want >= 0 and d_want != d_got:
                raise FeedError(f"DataFeeder: feed '{self.name}' is declared with shape "
                                f"{self.shape} but the minibatch has shape {list(arr.shape)} "
                                f"(samples of shape {list(first)})")
        return arr


class _LoDColumn(_Column):
    """A LoD feed variable: each sample is a sequence (lod_level 1) or a sequence of
    sub-sequences (2) of tokens; the minibatch becomes one LoDTensor with their lengths."""

    def __init__(self, var: Variable):
        super().__init__(var)
        self.level = var.lod_level
        self.token_shape = [d for d in (var.shape or (-1,))[1:]]

    def batch(self, values: list) -> LoDTensor:
        lengths: list[list[int]] = [[] for _ in range(self.level)]
        tokens: list = []

        def walk(value, depth: int, index: int) -> None:
            if depth == self.level:
                tokens.append(value)
                return
            if isinstance(value, str | bytes) or not hasattr(value, "__len__"):
                raise FeedError(f"DataFeeder: feed '{self.name}', sample {index}: lod_level="
                                f"{self.level} expects nested sequences {self.level} deep, "
                                f"found {value!r:.60} at depth {depth}")
            lengths[depth].append(len(value))
            for item in value:
                walk(item, depth + 1, index)

        for i, value in enumerate(values):
            walk(value, 0, i)
        if tokens:
            arr = self.convert(tokens, 0)
        else:
            arr = np.zeros((0,), self.dtype)
        per_token = math.prod(d for d in self.token_shape if d >= 0)
        known = all(d >= 0 for d in self.token_shape)
        if known and arr.size != len(tokens) * per_token:
            raise FeedError(f"DataFeeder: feed '{self.name}': its tokens have shape "
                            f"{list(arr.shape[1:])} but the program declares "
                            f"{self.token_shape} per token (shape {self.shape})")
        arr = arr.reshape(len(tokens), *self.token_shape) if known else arr
        return LoDTensor(arr, lengths)


class DataFeeder:
    """``DataFeeder(feed_list, place, program=None)``: ``feed(minibatch)`` turns a list of
    samples (each a tuple with one value per feed variable) into ``{name: numpy array}`` of
    the declared dtypes and shapes. The arrays stay on the host; ``Executor.run`` places them.
    """

    def __init__(self, feed_list, place, program: Program | None = None):
        program = program if program is not None else default_main_program()
        if isinstance(feed_list, str | Variable) or not hasattr(feed_list, "__iter__"):
            raise FeedError("DataFeeder: feed_list must be a list of feed Variables (or "
                            f"their names), got {type(feed_list).__name__}")
        if not isinstance(program, Program):
            raise FeedError(f"DataFeeder: program must be a Program, got "
                            f"{type(program).__name__}")
        self.feed_vars = [_feed_var(v, program) for v in feed_list]
        self.feed_names = [v.name for v in self.feed_vars]
        self.feed_dtypes = [v.dtype for v in self.feed_vars]
        self.feed_shapes = [list(v.shape or ()) for v in self.feed_vars]
        self.feed_lod_level = [v.lod_level for v in self.feed_vars]
        self.place = place
        self._columns = [_LoDColumn(v) if v.lod_level else _Column(v) for v in self.feed_vars]

    def feed(self, iterable) -> dict[str, np.ndarray]:
        """One minibatch (a list of samples) -> ``{feed name: array}``; a LoD feed variable's
        samples (variable-length sequences) become one LoDTensor (docs/lod.md)."""
        if not hasattr(iterable, "__iter__"):
            raise FeedError("DataFeeder.feed takes a minibatch (a list of samples), got "
                            f"{type(iterable).__name__}")
        samples = list(iterable)
        if not samples:
            raise FeedError("DataFeeder.feed: the minibatch has no samples")
        n = len(self._columns)
        for i, sample in enumerate(samples):
            if not isinstance(sample, list | tuple) or len(sample) != n:
                got = len(sample) if isinstance(sample, list | tuple) else type(sample).__name__
                raise FeedError(f"DataFeeder.feed: sample {i} must be a tuple or list of {n} "
                                f"values, one per feed variable {self.feed_names}; got {got}")
        return {c.name: c.batch([s[k] for s in samples]) for k, c in enumerate(self._columns)}

    def _get_number_of_places_(self, num_places=None) -> int:
        if num_places is not None:
            try:
                count = None if isinstance(num_places, bool) else operator.index(num_places)
            except TypeError:
                count = None
            if count is None or count < 1:
                raise FeedError(f"DataFeeder: num_places must be a whole number >= 1, got "
                                f"{num_places!r}")
            return count
        if isinstance(self.place, CUDAPlace):
            import jax
            try:
                return len(jax.devices("gpu"))
            except RuntimeError:  # no GPU backend: say so rather than count zero devices
                raise FeedError("DataFeeder: the place is a CUDAPlace but JAX sees no GPU; "
                                "give num_places or a CPUPlace") from None
        cpu_num = os.environ.get("CPU_NUM", "").strip()
        return int(cpu_num) if cpu_num.isdigit() and int(cpu_num) > 0 else (os.cpu_count() or 1)

    def feed_parallel(self, iterable, num_places=None):
        """One minibatch per device -> a generator of feed dicts, one per device (as a list
        it is the per-device feed that ``Executor.run`` takes for a data-parallel program)."""
        batches = list(iterable)
        num = self._get_number_of_places_(num_places)
        if len(batches) != num:
            raise FeedError(f"DataFeeder.feed_parallel takes one minibatch per device: got "
                            f"{len(batches)} minibatches for {num} devices")
        return (self.feed(b) for b in batches)

    def decorate_reader(self, reader, multi_devices: bool, num_places=None,
                        drop_last: bool = True):
        """A reader of feed dicts from a reader of minibatches; with ``multi_devices``, of
        lists of one feed dict per device (a trailing group smaller than the device count is
        dropped; ``drop_last=False`` makes it an error, as in Paddle)."""

        def feeds():
            if not multi_devices:
                for batch in reader():
                    yield self.feed(batch)
                return
            num = self._get_number_of_places_(num_places)
            group = []
            for batch in reader():
                group.append(batch)
                if len(group) == num:
                    yield list(self.feed_parallel(group, num))
                    group = []
            if group and not drop_last:
                raise FeedError(f"DataFeeder.decorate_reader: {len(group)} minibatch(es) are "
                                f"left over for {num} devices; keeping them is not "
                                "implemented (use drop_last=True)")

        return feeds
