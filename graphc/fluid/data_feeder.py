"""``fluid.DataFeeder``: turns a reader's minibatch (a list of samples) into a feed dict,
converted to each feed variable's declared dtype and shape."""

from __future__ import annotations

import operator
import os

from ..ir.default_programs import default_main_program
from ..ir.program import Program, Variable
from ..runtime.executor import FeedError
from ..runtime.feed_columns import column_for
from ..runtime.lod_tensor import LoDTensor
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


class DataFeeder:
    """``DataFeeder(feed_list, place, program=None)``: ``feed(minibatch)`` turns a list of
    samples (each a tuple with one value per feed variable) into ``{name: LoDTensor}`` of the
    declared dtypes and shapes, as Paddle 1.8 (a dense variable's with an empty LoD). The
    values stay on the host; ``Executor.run`` places them."""

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
        self._columns = [column_for(v) for v in self.feed_vars]

    def feed(self, iterable) -> dict[str, LoDTensor]:
        """One minibatch (a list of samples) -> ``{feed name: LoDTensor}``: a LoD feed
        variable's samples (variable-length sequences) become its tokens and lengths
        (docs/lod.md), a dense variable's one array with an empty LoD, as Paddle's feeder
        returns them (scripts call ``.lod()`` or ``np.array(...)`` on either)."""
        if getattr(iterable, "__iter__", None) is None:
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
        out = {}
        for k, c in enumerate(self._columns):
            value = c.batch([s[k] for s in samples])
            out[c.name] = value if isinstance(value, LoDTensor) else LoDTensor(value)
        return out

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
