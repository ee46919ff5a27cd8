"""Paddle 1.x's reader layers (``fluid.layers.py_reader``, ``create_py_reader_by_data``,
``read_file``): a non-iterable DataLoader behind Paddle's reader-variable spellings."""

from __future__ import annotations

import queue as _queue

from ..dataio.io import DataLoader, DataLoaderError
from ..ir import unique_name
from ..ir.program import Variable
from ..layers.tensor import declare_data

__all__ = ["PushQueue", "PyReaderVariable", "create_py_reader_by_data", "py_reader", "read_file"]


class PyReaderVariable:
    """What ``layers.py_reader`` returns: Paddle's reader variable. ``read_file(reader)``
    gives its data variables; ``decorate_*`` set its source; ``start()``/``reset()`` run an
    epoch, during which every ``exe.run(main)`` without a feed reads the next batch (and
    raises ``fluid.core.EOFException`` when none is left), as Paddle's read op does."""

    def __init__(self, name: str, feed_list: list[Variable], capacity: int):
        self.name = name
        self.feed_list = feed_list
        self._loader = DataLoader(feed_list, capacity, iterable=False)
        self._push = None

    @property
    def queue(self) -> PushQueue:
        """Paddle's ``reader.queue``: push batches (``push(LoDTensorArray)``, one tensor per
        data variable) that the runs read in order; ``close()`` ends the epoch (the run
        after the last batch raises EOFException). Taking it sets the reader's source."""
        if self._push is None:
            self._push = PushQueue(self._loader.capacity)
            self._loader.set_batch_generator(self._push.batches)
            self._loader.start()
        return self._push

    @property
    def thread(self):
        """The thread reading the current epoch's batches (Paddle's scripts join it)."""
        epoch = self._loader._epoch
        return epoch.thread if epoch is not None else _FinishedThread()

    def decorate_paddle_reader(self, reader, places=None) -> PyReaderVariable:
        """``reader()`` yields lists of samples (a ``paddle.batch`` reader)."""
        self._loader.set_sample_list_generator(reader, places)
        return self

    decorate_sample_list_generator = decorate_paddle_reader

    def decorate_tensor_provider(self, provider, places=None) -> PyReaderVariable:
        """``provider()`` yields whole batches, one array per data variable."""
        self._loader.set_batch_generator(provider, places)
        return self

    decorate_batch_generator = decorate_tensor_provider

    def decorate_sample_generator(self, sample_generator, batch_size, drop_last=True,
                                  places=None) -> PyReaderVariable:
        self._loader.set_sample_generator(sample_generator, batch_size, drop_last, places)
        return self

    def start(self) -> None:
        self._loader.start()

    def reset(self) -> None:
        self._loader.reset()
        self._push = None  # a pushed epoch ends with it; the next .queue is a fresh one

    def __repr__(self) -> str:
        return f"PyReaderVariable({self.name}, {[v.name for v in self.feed_list]})"


class _FinishedThread:
    def join(self, timeout=None) -> None:
        return None


class PushQueue:
    """Batches pushed from Python (Paddle's LoDTensorBlockingQueue): ``push`` blocks while
    ``capacity`` batches wait and returns False once the queue is closed."""

    _END = object()

    def __init__(self, capacity: int):
        self._q: _queue.Queue = _queue.Queue(maxsize=capacity)
        self._capacity, self._closed = capacity, False

    def push(self, tensors) -> bool:
        if self._closed:
            return False
        self._q.put(list(tensors))
        return True

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._q.put(self._END)

    def size(self) -> int:
        return self._q.qsize() - (1 if self._closed and self._q.qsize() else 0)

    def capacity(self) -> int:
        return self._capacity

    def is_closed(self) -> bool:
        return self._closed

    def batches(self):
        """The pushed batches in order, until ``close()`` (the loader's batch generator)."""
        while True:
            item = self._q.get()
            if item is self._END:
                return
            yield item


def _check_capacity(capacity, where: str) -> int:
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise DataLoaderError(f"{where}: capacity must be an int of at least 1, got "
                              f"{capacity!r}")
    return capacity


def py_reader(capacity, shapes, dtypes, lod_levels=None, name=None, use_double_buffer=True):
    """A reader of batches of ``len(shapes)`` variables (each shape with its batch
    dimension, -1 where unknown); ``use_double_buffer`` is always on (batches are placed on
    the device ahead of the step)."""
    _check_capacity(capacity, "py_reader")
    shapes, dtypes = list(shapes), list(dtypes)
    lod_levels = [0] * len(shapes) if lod_levels is None else list(lod_levels)
    if not shapes or len(dtypes) != len(shapes) or len(lod_levels) != len(shapes):
        raise DataLoaderError(f"py_reader: shapes, dtypes and lod_levels need one entry per "
                              f"variable, got {len(shapes)}, {len(dtypes)} and "
                              f"{len(lod_levels)}")
    base = name or unique_name.generate("py_reader")
    feed_list = [declare_data(f"{base}.out_{i}", list(shape), dtype, int(level),
                              layer="py_reader")
                 for i, (shape, dtype, level) in enumerate(zip(shapes, dtypes, lod_levels))]
    return PyReaderVariable(base, feed_list, capacity)


def create_py_reader_by_data(capacity, feed_list, name=None, use_double_buffer=True):
    """A reader that feeds the data variables ``feed_list`` themselves."""
    _check_capacity(capacity, "create_py_reader_by_data")
    feed_list = list(feed_list or [])
    if not feed_list or not all(isinstance(v, Variable) for v in feed_list):
        raise DataLoaderError("create_py_reader_by_data: feed_list must be a non-empty list "
                              "of data Variables")
    return PyReaderVariable(name or unique_name.generate("create_py_reader"), feed_list,
                            capacity)


def read_file(reader):
    """The data variables of ``reader`` (one Variable when it has one, else a list)."""
    if not isinstance(reader, PyReaderVariable):
        raise DataLoaderError(f"read_file takes what layers.py_reader returns, got "
                              f"{type(reader).__name__}")
    out = list(reader.feed_list)
    return out[0] if len(out) == 1 else out
