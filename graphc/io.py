"""Paddle's ``fluid.io`` spellings: save/load persistables (safetensors checkpoints, see
graphc.runtime.checkpoint), and ``DataLoader``, which prepares batches ahead of the step.

DataLoader
----------
``DataLoader.from_generator(feed_list=[x, y], capacity=2)`` then one of

- ``set_batch_generator(gen, places=None)``: ``gen()`` yields whole batches, each a list or
  tuple of arrays in ``feed_list`` order (or a dict by variable name);
- ``set_sample_list_generator(gen, places=None)``: ``gen()`` yields lists of samples, each
  list one batch; a sample is a tuple of per-variable values in ``feed_list`` order;
- ``set_sample_generator(gen, batch_size, drop_last=True, places=None)``: ``gen()`` yields
  single samples, grouped into batches of ``batch_size`` (the last, shorter one is dropped
  when ``drop_last``);

and ``for data in loader(): exe.run(prog, feed=data, fetch_list=...)``: every item is a feed
dict ``{name: array}`` (a list in ``feed_list`` order with ``return_list=True``).

How it works: each epoch (each call of ``loader()``) starts one daemon thread
(``graphc-DataLoader-...``) that runs the generator, turns every batch into NumPy arrays of
the variables' dtypes (same-kind casts only: float64 -> float32 is fine, float -> int is an
error), checks their shapes against ``feed_list`` (-1 matches any size; a batch of samples
whose values have the right size is reshaped, so a label ``3`` fits ``[-1, 1]``), puts them on
the device(s) and waits until the copy is done, then hands them over through a queue of
``capacity`` batches (2: double buffering). The training loop only takes ready device arrays.

Placement (``places``): None puts batches on the default device; a Place (or a list of one)
on that device; a list of several places, or a data-parallel ``CompiledProgram``, splits each
batch along its batch dimension over the devices with exactly the sharding the compiled step
expects (``graphc.backends.jax.data_parallel.feed_sharding``), so the executor passes the
arrays to the step without a copy. Given a CompiledProgram whose
``exec_strategy.num_iteration_per_run`` is K, every item stacks K consecutive batches on a
new leading axis (one ``exe.run`` runs them all); a trailing group of fewer than K batches is
dropped when ``drop_last`` (the default), and is an error otherwise. Over several processes
batches stay NumPy (each process feeds its own part; the step assembles the global array).

Errors: an exception in the generator is raised from the loop's ``next()`` as a
``DataLoaderError`` naming it (the original chained; a GraphcError, such as a dataset's
DatasetError naming file and line, is raised as it is); a batch of the wrong dtype or shape is
a ``DataLoaderError`` naming the variable and the batch. The thread has stopped by then.
``loader.reset()`` (or starting a new epoch) stops the thread; after leaving a loop early,
call ``reset()``.
``loader.last_epoch_stats`` says how long the loop waited for data (``wait_s``) in the last
epoch, over how many items.
"""

from __future__ import annotations

import itertools
import math
import queue
import threading
import time
from collections.abc import Mapping

import jax
import numpy as np

from .ir.errors import GraphcError
from .ir.program import Variable
from .ir.types import dims_compatible
from .runtime.checkpoint import (  # noqa: F401
    CheckpointError,
    load,
    load_persistables,
    save,
    save_persistables,
)
from .runtime.places import Place

__all__ = ["CheckpointError", "DataLoader", "DataLoaderError", "load", "load_persistables",
           "save", "save_persistables"]

_POLL_S = 0.05  # how often a blocked put/get looks whether it should give up
_JOIN_S = 5.0  # how long reset() waits for the thread (a generator stuck in user code)
_counter = itertools.count()


class DataLoaderError(GraphcError):
    """A generator raised, or produced a batch that does not fit the feed variables."""


class _End:
    """The thread's last item: the epoch is complete."""


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


def _var_dtype(var: Variable) -> np.dtype:
    import jax.numpy as jnp
    return np.dtype(jnp.dtype(var.dtype))


def to_feed_array(value, var: Variable, what: str) -> np.ndarray:
    """``value`` as a NumPy array of ``var``'s dtype and shape, or a DataLoaderError naming
    ``var`` and ``what`` (which batch). Used by DataLoader and graphc.dataset."""
    want = _var_dtype(var)
    try:
        arr = np.asarray(value)
    except Exception as exc:  # ragged lists and the like
        raise DataLoaderError(f"{what}: variable '{var.name}' could not be made an array: "
                              f"{exc}") from None
    if arr.dtype != want:
        ok = np.can_cast(arr.dtype, want, "same_kind") or (
            arr.dtype.kind in "biu" and want.kind in "biuf")
        if not ok:
            raise DataLoaderError(f"{what}: variable '{var.name}' is declared {want} but got "
                                  f"{arr.dtype} values (only same-kind casts are made)")
        arr = arr.astype(want)
    shape = tuple(var.shape or ())
    if not dims_compatible(arr.shape, shape):
        per_sample = shape[1:]
        if (arr.ndim >= 1 and per_sample and all(d >= 0 for d in per_sample)
                and arr.size == arr.shape[0] * math.prod(per_sample)):
            arr = arr.reshape((arr.shape[0], *per_sample))
        else:
            raise DataLoaderError(f"{what}: variable '{var.name}' is declared with shape "
                                  f"{list(shape)} but got an array of shape {list(arr.shape)} "
                                  "(-1 matches any size)")
    return arr


class _Placement:
    """Where an epoch's batches go: the device or sharding, and K batches per item."""

    def __init__(self, places):
        from .runtime.compiled_program import CompiledProgram

        self.iterations = 1
        self.target = None  # None: the default device, uncommitted
        self.parts = 1
        self.host_only = False
        devices, inter = None, 0
        if isinstance(places, CompiledProgram):
            self.iterations = places.exec_strategy.num_iteration_per_run
            devices, inter = places.devices, places.inter_nranks
        elif isinstance(places, Place):
            devices = [places.jax_device()]
        elif places is not None:
            places = list(places)
            bad = [p for p in places if not isinstance(p, Place)]
            if bad or not places:
                raise DataLoaderError("places must be a graphc Place, a list of Places, or a "
                                      f"CompiledProgram; got {places!r}")
            devices = [p.jax_device() for p in places]
        if not devices:
            return
        if isinstance(places, CompiledProgram) or len(devices) > 1:
            from .backends.jax.data_parallel import feed_sharding
            self.parts = sum(d.process_index == jax.process_index() for d in devices)
            if self.parts != len(devices):
                self.host_only = True  # several processes: the step assembles the batch
                return
            self.target = feed_sharding(devices, self.iterations, inter)
        else:
            self.target = devices[0]

    def put(self, arrays: list[np.ndarray]) -> list:
        if self.host_only:
            return arrays
        placed = jax.device_put(arrays, self.target)
        for a in placed:  # copy done here, on the loader's thread, not in the step
            a.block_until_ready()
        return placed


class DataLoader:
    """Prepares batches on a background thread and places them on the device(s) ahead of the
    step (see the module doc). Build with ``DataLoader.from_generator``."""

    def __init__(self, feed_list, capacity: int = 2, iterable: bool = True,
                 return_list: bool = False, drop_last: bool = True):
        if not iterable:
            raise DataLoaderError("iterable=False (start()/reset() with exe.run feeding from "
                                  "the loader) is not supported; iterate the loader: "
                                  "`for data in loader(): exe.run(prog, feed=data)`")
        feed_list = list(feed_list or [])
        if not feed_list or not all(isinstance(v, Variable) for v in feed_list):
            raise DataLoaderError("feed_list must be a non-empty list of data Variables "
                                  "(from graphc.data)")
        if int(capacity) < 1:
            raise DataLoaderError(f"capacity must be at least 1, got {capacity}")
        self.feed_list = feed_list
        self.capacity = int(capacity)
        self.return_list = return_list
        self.drop_last = drop_last
        self._source = None
        self._places = None
        self._epoch: _Epoch | None = None
        self.last_epoch_stats: dict | None = None

    @staticmethod
    def from_generator(feed_list=None, capacity: int = 2, use_double_buffer: bool = True,
                       iterable: bool = True, return_list: bool = False,
                       use_multiprocess: bool = False, drop_last: bool = True) -> DataLoader:
        """A loader for the data variables ``feed_list``, holding up to ``capacity`` ready
        batches. ``use_double_buffer`` and ``use_multiprocess`` are accepted for Paddle
        scripts: batches are always placed ahead of time, by a thread."""
        return DataLoader(feed_list, capacity, iterable, return_list, drop_last)

    # -- sources ----------------------------------------------------------------------
    def set_batch_generator(self, reader, places=None) -> DataLoader:
        """``reader()`` yields batches: arrays in ``feed_list`` order, or dicts by name."""
        names = [v.name for v in self.feed_list]

        def batches():
            for i, batch in enumerate(reader()):
                if isinstance(batch, Mapping):
                    missing = [n for n in names if n not in batch]
                    if missing:
                        raise DataLoaderError(f"batch {i}: no value for variable(s) {missing}")
                    batch = [batch[n] for n in names]
                elif not isinstance(batch, list | tuple):
                    batch = [batch]
                if len(batch) != len(names):
                    raise DataLoaderError(f"batch {i}: got {len(batch)} arrays for the "
                                          f"{len(names)} variables {names}")
                yield [to_feed_array(a, v, f"batch {i}") for a, v in zip(batch, self.feed_list)]

        return self._set(batches, places)

    def set_sample_list_generator(self, reader, places=None) -> DataLoader:
        """``reader()`` yields lists of samples (each list one batch); a sample is a tuple of
        per-variable values in ``feed_list`` order."""
        def batches():
            for i, samples in enumerate(reader()):
                yield self._stack(list(samples), f"batch {i}")

        return self._set(batches, places)

    def set_sample_generator(self, reader, batch_size: int, drop_last: bool = True,
                             places=None) -> DataLoader:
        """``reader()`` yields single samples, batched by ``batch_size`` here."""
        if int(batch_size) < 1:
            raise DataLoaderError(f"batch_size must be at least 1, got {batch_size}")

        def batches():
            it = iter(reader())
            for i in itertools.count():
                samples = list(itertools.islice(it, batch_size))
                if not samples or (drop_last and len(samples) < batch_size):
                    return
                yield self._stack(samples, f"batch {i}")

        return self._set(batches, places)

    def _stack(self, samples: list, what: str) -> list[np.ndarray]:
        n = len(self.feed_list)
        if not samples:
            raise DataLoaderError(f"{what}: an empty list of samples")
        columns = []
        for j, s in enumerate(samples):
            s = s if isinstance(s, list | tuple) else (s,)
            if len(s) != n:
                raise DataLoaderError(f"{what}: sample {j} has {len(s)} values for the {n} "
                                      f"variables {[v.name for v in self.feed_list]}")
            columns.append(s)
        out = []
        for k, var in enumerate(self.feed_list):
            try:
                stacked = np.stack([np.asarray(c[k]) for c in columns])
            except ValueError as exc:
                raise DataLoaderError(f"{what}: the samples' values for variable "
                                      f"'{var.name}' differ in shape ({exc})") from None
            out.append(to_feed_array(stacked, var, what))
        return out

    def _set(self, batches, places) -> DataLoader:
        self.reset()
        self._source, self._places = batches, places
        return self

    # -- epochs -------------------------------------------------------------------------
    def __call__(self):
        """Start an epoch: an iterator of feed dicts (lists with ``return_list``)."""
        if self._source is None:
            raise DataLoaderError("no generator set: call set_batch_generator, "
                                  "set_sample_list_generator or set_sample_generator first")
        self.reset()
        self._epoch = _Epoch(self, _Placement(self._places))
        return self._epoch

    __iter__ = __call__

    def reset(self) -> None:
        """Stop the current epoch's thread (if any) and drop its prepared batches."""
        if self._epoch is not None:
            self._epoch.close()
            self._epoch = None


class _Epoch:
    """One pass over the generator: the producer thread and the consumer's iterator."""

    def __init__(self, loader: DataLoader, placement: _Placement):
        self.loader = loader
        self.placement = placement
        self.names = [v.name for v in loader.feed_list]
        self.queue: queue.Queue = queue.Queue(maxsize=loader.capacity)
        self.stop = threading.Event()
        self.done = False
        self.items = 0
        self.wait_s = 0.0
        self.thread = threading.Thread(target=self._produce, daemon=True,
                                       name=f"graphc-DataLoader-{next(_counter)}")
        self.thread.start()

    # -- producer (the thread) ---------------------------------------------------------
    def _put(self, item) -> bool:
        while not self.stop.is_set():
            try:
                self.queue.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self) -> None:
        k, place = self.placement.iterations, self.placement
        parts, drop_last = place.parts, self.loader.drop_last
        source = self.loader._source()
        try:
            group = []
            for i, batch in enumerate(source):
                if self.stop.is_set():
                    return
                if parts > 1:
                    for var, arr in zip(self.loader.feed_list, batch):
                        if arr.ndim == 0 or arr.shape[0] % parts:
                            raise DataLoaderError(
                                f"batch {i}: variable '{var.name}' has batch size "
                                f"{arr.shape[0] if arr.ndim else '(scalar)'}, which does not "
                                f"split evenly over {parts} devices")
                group.append(batch)
                if len(group) < k:
                    continue
                if k == 1:
                    arrays = group[0]
                else:
                    arrays = []
                    for j, var in enumerate(self.loader.feed_list):
                        parts_j = [b[j] for b in group]
                        if len({p.shape for p in parts_j}) != 1:
                            raise DataLoaderError(
                                f"batches {i - k + 1}..{i}: variable '{var.name}' has shapes "
                                f"{[list(p.shape) for p in parts_j]}; the {k} batches of one "
                                "run (num_iteration_per_run) are stacked, so they must agree")
                        arrays.append(np.stack(parts_j))
                group = []
                if not self._put(place.put(arrays)):
                    return
            if group and not drop_last:
                raise DataLoaderError(
                    f"the epoch ended with {len(group)} batch(es), fewer than the "
                    f"num_iteration_per_run = {k} one run takes; use drop_last=True to drop "
                    "them, or give a multiple of K batches")
            self._put(_End)
        except BaseException as exc:  # handed to the consumer, raised from next()
            self._put(_Failure(exc))
        finally:
            source.close()  # a generator's cleanup (a dataset's reader threads) runs now

    # -- consumer ----------------------------------------------------------------------
    def __iter__(self):
        return self

    def __next__(self):
        if self.done:
            raise StopIteration
        t0 = time.perf_counter()
        while True:
            try:
                item = self.queue.get(timeout=_POLL_S)
                break
            except queue.Empty:
                if not self.thread.is_alive() and self.queue.empty():
                    self._finish(t0)
                    raise DataLoaderError("the loader's thread stopped without finishing "
                                          "the epoch (was the loader reset?)") from None
        self.wait_s += time.perf_counter() - t0
        if item is _End:
            self._finish()
            raise StopIteration
        if isinstance(item, _Failure):
            self._finish()
            exc = item.exc
            if isinstance(exc, GraphcError):  # already says what is wrong (a dataset's too)
                raise exc
            raise DataLoaderError(f"the generator raised {type(exc).__name__}: {exc}") from exc
        self.items += 1
        if self.loader.return_list:
            return list(item)
        return dict(zip(self.names, item))

    def _finish(self, t0: float | None = None) -> None:
        if t0 is not None:
            self.wait_s += time.perf_counter() - t0
        self.done = True
        self.close()

    def close(self) -> None:
        """Stop the thread, drop what it prepared, and record the epoch's statistics."""
        self.stop.set()
        while True:
            try:
                self.queue.get_nowait()
            except queue.Empty:
                break
        if self.thread is not threading.current_thread():
            self.thread.join(_JOIN_S)
        self.done = True
        self.loader.last_epoch_stats = {"items": self.items, "wait_s": self.wait_s}
