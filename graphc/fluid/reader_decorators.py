"""Paddle's reader decorators (``paddle.reader.*``: shuffle, buffered, compose, chain, ...)
and ``paddle.batch``; ``graphc.reader`` is this module, so ``import graphc as paddle`` ports.

A *reader* is a function of no arguments that returns an iterable of samples; every
decorator takes readers and returns a new reader, evaluated lazily each time it is called.
"""

from __future__ import annotations

import itertools
import queue
import random
import threading
from concurrent.futures import ThreadPoolExecutor

from ..ir.errors import GraphcError

__all__ = ["ComposeNotAligned", "ReaderError", "batch", "buffered", "cache", "chain",
           "compose", "firstn", "map_readers", "multiprocess_reader", "shuffle",
           "xmap_readers"]


class ReaderError(GraphcError):
    """A reader decorator was given bad arguments, or its reader failed in a thread."""


class ComposeNotAligned(ReaderError, ValueError):
    """``compose(..., check_alignment=True)``: the readers yielded different numbers of
    samples."""


def _positive_int(value, what: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ReaderError(f"{where}: {what} must be a positive integer, got {value!r}")
    return value


def batch(reader, batch_size: int, drop_last: bool = False):
    """Group ``reader``'s samples into lists of ``batch_size``; the last, shorter list is
    kept unless ``drop_last``. As Paddle does, a float size (``args.batch_size / dev_count``)
    is truncated by int() first; a size <= 0 is still refused."""
    if isinstance(batch_size, float):
        batch_size = int(batch_size)
    batch_size = _positive_int(batch_size, "batch_size", "batch")

    def batch_reader():
        group = []
        for sample in reader():
            group.append(sample)
            if len(group) == batch_size:
                yield group
                group = []
        if group and not drop_last:
            yield group

    return batch_reader


def map_readers(func, *readers):
    """Samples ``func(a, b, ...)`` over the readers' samples taken in step."""
    def reader():
        for items in zip(*(r() for r in readers)):
            yield func(*items)
    return reader


def shuffle(reader, buf_size: int):
    """Shuffle within consecutive windows of ``buf_size`` samples (Python's ``random``)."""
    buf_size = _positive_int(buf_size, "buf_size", "shuffle")

    def shuffled():
        buf = []
        for sample in reader():
            buf.append(sample)
            if len(buf) >= buf_size:
                random.shuffle(buf)
                yield from buf
                buf = []
        random.shuffle(buf)
        yield from buf

    return shuffled


def chain(*readers):
    """All samples of the first reader, then of the second, ..."""
    def chained():
        return itertools.chain.from_iterable(r() for r in readers)
    return chained


def compose(*readers, check_alignment: bool = True):
    """Samples joined across readers into one flat tuple: ``(a, (b, c))`` -> ``(a, b, c)``.
    With ``check_alignment``, readers of different lengths raise ComposeNotAligned;
    otherwise the shortest decides."""
    def as_tuple(x):
        return x if isinstance(x, tuple) else (x,)

    def composed():
        iterators = [iter(r()) for r in readers]
        if not check_alignment:
            for items in zip(*iterators):
                yield sum((as_tuple(x) for x in items), ())
            return
        for items in itertools.zip_longest(*iterators, fillvalue=_MISSING):
            if any(x is _MISSING for x in items):
                raise ComposeNotAligned("compose: the readers yielded different numbers of "
                                        "samples (pass check_alignment=False to stop at the "
                                        "shortest)")
            yield sum((as_tuple(x) for x in items), ())

    return composed


_MISSING = object()
_END = object()


def _pump(reader, q: queue.Queue, stop: threading.Event, failure: list) -> None:
    """Put ``reader()``'s samples, then _END, into ``q`` (a thread's body); returns early once
    ``stop`` is set (the consumer went away), so no thread is left blocked on a full queue."""
    def put(item) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    try:
        for sample in reader():
            if not put(sample):
                return
    except BaseException as exc:  # handed to the consumer
        failure.append(exc)
    put(_END)


def buffered(reader, size: int):
    """Read ahead up to ``size`` samples in a background thread."""
    size = _positive_int(size, "size", "buffered")

    def buffered_reader():
        q: queue.Queue = queue.Queue(maxsize=size)
        failure: list[BaseException] = []
        stop = threading.Event()
        threading.Thread(target=_pump, args=(reader, q, stop, failure), daemon=True,
                         name="graphc-reader-buffered").start()
        try:
            while (sample := q.get()) is not _END:
                yield sample
        finally:  # also when the consumer stops early: the thread ends instead of blocking
            stop.set()
        if failure:
            raise ReaderError(f"buffered: the reader failed: {failure[0]!r}") from failure[0]

    return buffered_reader


def firstn(reader, n: int):
    """The first ``n`` samples."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ReaderError(f"firstn: n must be a non-negative integer, got {n!r}")

    def first():
        return itertools.islice(reader(), n)
    return first


def xmap_readers(mapper, reader, process_num: int, buffer_size: int, order: bool = False):
    """``mapper`` applied to every sample by ``process_num`` threads, ``buffer_size`` samples
    ahead. ``order=True`` keeps the reader's order; otherwise samples come as they finish."""
    process_num = _positive_int(process_num, "process_num", "xmap_readers")
    buffer_size = _positive_int(buffer_size, "buffer_size", "xmap_readers")

    def xmapped():
        with ThreadPoolExecutor(process_num, thread_name_prefix="graphc-xmap") as pool:
            pending: list = []
            for sample in reader():
                pending.append(pool.submit(mapper, sample))
                if len(pending) >= buffer_size:
                    yield from _drain(pending, order, keep=buffer_size // 2)
            yield from _drain(pending, order, keep=0)

    return xmapped


def _drain(pending: list, order: bool, keep: int):
    """Yield finished results until ``keep`` futures remain (the oldest first if ``order``)."""
    while len(pending) > keep:
        if order:
            future = pending.pop(0)
        else:
            done = next((f for f in pending if f.done()), pending[0])
            pending.remove(done)
            future = done
        yield future.result()


def cache(reader):
    """Read ``reader`` once, on the first call, and replay its samples on every call."""
    saved: list = []
    filled = [False]

    def cached():
        if not filled[0]:
            samples = list(reader())  # a reader that fails part-way leaves nothing saved
            saved.extend(samples)
            filled[0] = True
        return iter(saved)

    return cached


def multiprocess_reader(readers, use_pipe: bool = True, queue_size: int = 1000):
    """All samples of ``readers``, read concurrently (graphc uses threads, not processes:
    samples arrive interleaved, in no fixed order, as with Paddle)."""
    if not readers:
        raise ReaderError("multiprocess_reader: readers is empty")
    queue_size = _positive_int(queue_size, "queue_size", "multiprocess_reader")

    def merged():
        q: queue.Queue = queue.Queue(maxsize=queue_size)
        failure: list[BaseException] = []
        stop = threading.Event()
        for r in readers:
            threading.Thread(target=_pump, args=(r, q, stop, failure), daemon=True,
                             name="graphc-reader-multi").start()
        finished = 0
        try:
            while finished < len(readers):
                sample = q.get()
                if sample is _END:
                    finished += 1
                else:
                    yield sample
        finally:
            stop.set()
        if failure:
            raise ReaderError(f"multiprocess_reader: a reader failed: {failure[0]!r}") \
                from failure[0]

    return merged
