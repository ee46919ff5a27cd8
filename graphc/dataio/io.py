"""Paddle's ``fluid.io`` spellings: save/load of variables and inference models (graphc.saving),
and ``DataLoader``/``PyReader``, which prepare batches ahead of the step.

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
Non-iterable loaders (Paddle's ``iterable=False``): the loader is bound to the program
that declares its ``feed_list``; ``loader.start()`` starts an epoch, and every
``exe.run(program)`` (or of a CompiledProgram of it) given no feed takes its next batch, one
per device for a data-parallel program (Paddle reads one batch per device), K of them with
``num_iteration_per_run = K``. When none is left the run raises ``EOFException``
(``fluid.core.EOFException``) and changes nothing; ``loader.reset()`` ends the epoch:
``loader.start(); try: while True: exe.run(main) except EOFException: loader.reset()``.
(graphc.io adds a feed provider that reads from bound loaders to the process's host
services at import (``runtime.host_services``); an Executor given its own services reads
from loaders only if they hold that provider too.)

``places`` that name a device more than once (``[CPUPlace()] * 2``) give one batch per
place: each item is a list of feeds, batch i on place i (a trailing group smaller than the
number of places is dropped when ``drop_last``). ``PyReader`` is the same loader with the
``decorate_*`` spellings; ``save_*``/``load_*`` are documented in graphc.saving.

LoD variables (``lod_level`` 1 or 2) take, per batch, a LoDTensor or a list of
variable-length samples (as DataFeeder); the thread packs them into size buckets
(runtime/lod.py, split by whole sequences over the devices, K batches in one bucket) and
places them like dense arrays; docs/lod.md.

``loader.last_epoch_stats`` says how long the loop waited for data (``wait_s``) in the last
epoch, over how many items.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Mapping
from weakref import WeakKeyDictionary

import jax
import numpy as np

from ..ir.default_programs import default_main_program
from ..ir.program import Program, Variable
from ..runtime.checkpoint import CheckpointError
from ..runtime.host_services import process_services
from ..runtime.run_as import DATA_PARALLEL
from .loader_epoch import (  # noqa: F401  (_var_dtype, to_feed_array: used by graphc.dataset)
    DataLoaderError,
    EOFException,
    _Epoch,
    _Placement,
    _var_dtype,
    to_feed_array,
    to_lod_tensor,
)
from .saving import (  # noqa: F401  (Paddle's fluid.io save/load spellings)
    get_parameter_value,
    get_parameter_value_by_name,
    get_program_parameter,
    get_program_persistable_vars,
    is_parameter,
    is_persistable,
    load,
    load_inference_model,
    load_params,
    load_persistables,
    load_vars,
    save,
    save_inference_model,
    save_params,
    save_persistables,
    save_vars,
)

__all__ = ["CheckpointError", "DataLoader", "DataLoaderError", "EOFException", "PyReader",
           "get_program_parameter", "get_program_persistable_vars", "load",
           "load_inference_model", "load_params", "load_persistables", "load_vars", "save",
           "save_inference_model", "save_params", "save_persistables", "save_vars"]


def _check_reader(reader, method: str) -> None:
    # refused here, not at the first epoch, where the error would name no call
    if not callable(reader):
        raise DataLoaderError(f"{method}: reader must be a callable returning an iterator "
                              f"(a generator function), got a {type(reader).__name__}")


class DataLoader:
    """Prepares batches on a background thread and places them on the device(s) ahead of the
    step (see the module doc). Build with ``DataLoader.from_generator``."""

    def __init__(self, feed_list, capacity: int | None = 2, iterable: bool = True,
                 return_list: bool = False, drop_last: bool = True):
        capacity = 2 if capacity is None else capacity
        feed_list = list(feed_list or [])
        if not feed_list or not all(isinstance(v, Variable) for v in feed_list):
            raise DataLoaderError("feed_list must be a non-empty list of data Variables "
                                  "(from graphc.data)")
        try:
            ok = int(capacity) >= 1
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise DataLoaderError(f"capacity must be an int of at least 1, got {capacity!r}")
        self.feed_list = feed_list
        self.iterable = bool(iterable)
        self.capacity = int(capacity)
        self.return_list = return_list
        self.drop_last = drop_last
        self._source = None
        self._places = None
        self._epoch: _Epoch | None = None
        self.last_epoch_stats: dict | None = None
        if not self.iterable:
            # exe.run(program) with no feed pulls from the started loaders bound to it
            _bind(feed_list[0].block.program, self)

    @staticmethod
    def from_generator(feed_list=None, capacity: int | None = 2, use_double_buffer: bool = True,
                       iterable: bool = True, return_list: bool = False,
                       use_multiprocess: bool = False, drop_last: bool = True) -> DataLoader:
        """A loader for the data variables ``feed_list``, holding up to ``capacity`` ready
        batches. ``use_double_buffer`` and ``use_multiprocess`` are accepted for Paddle
        scripts: batches are always placed ahead of time, by a thread. ``iterable=False``:
        see "Non-iterable loaders" in the module doc."""
        return DataLoader(feed_list, capacity, iterable, return_list, drop_last)

    @staticmethod
    def from_dataset(dataset, places, drop_last: bool = True) -> DataLoader:
        """Paddle's DatasetLoader: an iterable loader over the batches of a graphc.dataset
        InMemoryDataset / QueueDataset (its ``set_use_var`` variables), placed on
        ``places`` as ``set_batch_generator`` places them."""
        from .dataset import DatasetBase
        if not isinstance(dataset, DatasetBase):
            raise DataLoaderError(f"from_dataset: dataset must be an InMemoryDataset or "
                                  f"QueueDataset, got {type(dataset).__name__}")
        dataset._check_ready()
        loader = DataLoader(dataset.use_vars, 2, True, False, drop_last)
        return loader.set_batch_generator(lambda: dataset._batches(1), places)

    # -- sources ----------------------------------------------------------------------
    def set_batch_generator(self, reader, places=None) -> DataLoader:
        """``reader()`` yields batches: arrays in ``feed_list`` order, or dicts by name."""
        _check_reader(reader, "set_batch_generator")
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
                yield [to_lod_tensor(a, v, f"batch {i}") if v.lod_level else
                       to_feed_array(a, v, f"batch {i}") for a, v in zip(batch, self.feed_list)]

        return self._set(batches, places)

    def set_sample_list_generator(self, reader, places=None) -> DataLoader:
        """``reader()`` yields lists of samples (each list one batch); a sample is a tuple of
        per-variable values in ``feed_list`` order."""
        _check_reader(reader, "set_sample_list_generator")
        def batches():
            for i, samples in enumerate(reader()):
                yield self._stack(list(samples), f"batch {i}")

        return self._set(batches, places)

    def set_sample_generator(self, reader, batch_size: int, drop_last: bool = True,
                             places=None) -> DataLoader:
        """``reader()`` yields single samples, batched by ``batch_size`` here."""
        _check_reader(reader, "set_sample_generator")
        if int(batch_size) < 1:
            raise DataLoaderError(f"batch_size must be at least 1, got {batch_size}")
        # a float of whole value batches as that int, as Paddle's batching (which compares
        # len(batch) == batch_size): metric_learning passes `batch / device_count`
        if batch_size != int(batch_size):
            raise DataLoaderError(f"batch_size must be a whole number, got {batch_size}")
        batch_size = int(batch_size)

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
            if var.lod_level:  # variable-length samples: one LoDTensor (docs/lod.md)
                out.append(to_lod_tensor([c[k] for c in columns], var, what))
                continue
            try:
                stacked = np.stack([np.asarray(c[k]) for c in columns])
            except ValueError as exc:
                raise DataLoaderError(f"{what}: the samples' values for variable "
                                      f"'{var.name}' differ in shape ({exc})") from None
            out.append(to_feed_array(_as_declared(stacked, var), var, what))
        return out

    def _set(self, batches, places) -> DataLoader:
        self.reset()
        self._source, self._places = batches, places
        return self

    # -- epochs -------------------------------------------------------------------------
    def __call__(self):
        """Start an epoch: an iterator of feed dicts (lists with ``return_list``). Before a
        generator is set, the loader itself, as Paddle's call returns its loader (PaddleCV
        video keeps ``loader()`` at build time and sets the generator later); iterating it
        then starts the epoch or names the missing generator."""
        if self._source is None and self.iterable:
            return self
        return self.__iter__()

    def __iter__(self):
        if not self.iterable:
            raise DataLoaderError("this loader was built with iterable=False: it feeds "
                                  "exe.run itself; call loader.start() and run the program "
                                  "without a feed until EOFException, then loader.reset()")
        self._check_source()
        self.reset()
        self._epoch = _Epoch(self, _Placement(self._places))
        return self._epoch

    def _check_source(self) -> None:
        if self._source is None:
            raise DataLoaderError("no generator set: call set_batch_generator, "
                                  "set_sample_list_generator or set_sample_generator first")

    def start(self) -> None:
        """Non-iterable loaders: start an epoch; every ``exe.run`` of the bound program
        without a feed takes the next batch, and raises EOFException when none is left."""
        if self.iterable:
            raise DataLoaderError("start() is for loaders built with iterable=False; iterate "
                                  "this one: `for data in loader(): exe.run(prog, feed=data)`")
        self._check_source()
        if self._epoch is not None:
            raise DataLoaderError("the loader is already started; call loader.reset() after "
                                  "EOFException (or to stop early) before starting again")
        self._epoch = _Epoch(self, _Placement(self._places))

    def reset(self) -> None:
        """Stop the current epoch's thread (if any) and drop its prepared batches."""
        if self._epoch is not None:
            self._epoch.close()
            self._epoch = None

    @property
    def queue(self) -> _QueueView:
        """Paddle's ``loader.queue``: how many prepared batches wait (``size()``), out of
        ``capacity()`` (scripts print it to see whether reading keeps up)."""
        return _QueueView(self)

    def _next_feed(self) -> dict:
        """The next batch of a started non-iterable loader, as a feed dict."""
        if self._epoch is None:
            raise DataLoaderError(
                "exe.run got no feed and the program's DataLoader (feed_list "
                f"{[v.name for v in self.feed_list]}) is not started: call loader.start() "
                "first (and loader.reset() after each EOFException)")
        try:
            item = next(self._epoch)
        except StopIteration:
            raise EOFException("the DataLoader's epoch is over (no batch left for exe.run); "
                               "call loader.reset(), then loader.start() for the next "
                               "epoch") from None
        if isinstance(item, list) and item and isinstance(item[0], dict | list):
            raise DataLoaderError("a non-iterable loader takes no places that repeat a "
                                  "device; the executor asks it for one batch per device")
        return item if isinstance(item, dict) else dict(zip(self._epoch.names, item))



# -- non-iterable loaders: exe.run(program) without a feed reads from them -----------------
# side table: Program -> weak references to the loaders built on it, a fact about each
# Program kept beside it (a loader holds its program through its feed variables, so a
# strong reference here would keep both alive for ever).
_BOUND: WeakKeyDictionary = WeakKeyDictionary()


def _bind(program: Program, loader: DataLoader) -> None:
    _BOUND.setdefault(program, []).append(weakref.ref(loader))


def feed_from_loaders(program_or_compiled):
    """The feed an ``exe.run`` with no feed takes from the non-iterable loaders bound to the
    program (None when there are none): one batch per device this process feeds,
    concatenated, and a list of K such feeds for ``num_iteration_per_run = K``."""
    from ..runtime.compiled_program import CompiledProgram
    compiled = program_or_compiled if isinstance(program_or_compiled, CompiledProgram) else None
    program = compiled.program if compiled is not None else (
        program_or_compiled if program_or_compiled is not None else default_main_program())
    loaders = _bound_loaders(program)
    if not loaders:
        return None
    if compiled is None:
        compiled = DATA_PARALLEL.compiled_for(program)
    parts, k = 1, 1
    if compiled is not None:
        k = compiled.exec_strategy.num_iteration_per_run
        if compiled.devices:
            parts = sum(d.process_index == jax.process_index() for d in compiled.devices)
    feeds = [{} for _ in range(k)]
    for loader in loaders:
        for feed in feeds:
            batches = [loader._next_feed() for _ in range(parts)]
            feed.update(batches[0] if parts == 1 else {
                n: _concat([b[n] for b in batches], n) for n in batches[0]})
    return feeds[0] if k == 1 else feeds


def _bound_loaders(program) -> list:
    """The live loaders bound to ``program``, or else to the program it was cloned from
    (``main.clone(for_test=True)`` reads the training loader's batches, as in Paddle)."""
    while isinstance(program, Program):
        refs = _BOUND.get(program)
        loaders = [loader for loader in (ref() for ref in refs or ()) if loader is not None]
        if loaders:
            return loaders
        source = getattr(program, "cloned_from", None)
        program = source() if source is not None else None
    return []


def _concat(values: list, name: str):
    """One device's batch after another: arrays along the batch dimension, LoDTensors by
    sequences (device i then gets batch i's sequences: every batch has as many)."""
    from ..runtime.lod import LoDTensor, concat_lod
    if isinstance(values[0], LoDTensor):
        return concat_lod(name, values)
    return np.concatenate([np.asarray(v) for v in values])


def _feed_from_bound_loaders(program_or_compiled):
    """The executor's feed provider (HostServices.add_feed_provider): a run without a
    feed reads from the program's non-iterable loaders (Paddle's reader ops)."""
    return feed_from_loaders(program_or_compiled) if _BOUND else None


process_services().add_feed_provider(_feed_from_bound_loaders)


class PyReader(DataLoader):
    """Paddle's ``fluid.io.PyReader(feed_list, capacity, use_double_buffer=True,
    iterable=True, return_list=False)``: a DataLoader with the ``decorate_*`` spellings."""

    def __init__(self, feed_list=None, capacity: int | None = None,
                 use_double_buffer: bool = True, iterable: bool = True,
                 return_list: bool = False):
        super().__init__(feed_list, capacity, iterable, return_list)

    def decorate_sample_generator(self, sample_generator, batch_size: int,
                                  drop_last: bool = True, places=None) -> PyReader:
        return self.set_sample_generator(sample_generator, batch_size, drop_last, places)

    def decorate_sample_list_generator(self, reader, places=None) -> PyReader:
        return self.set_sample_list_generator(reader, places)

    def decorate_batch_generator(self, reader, places=None) -> PyReader:
        return self.set_batch_generator(reader, places)

    def next(self):
        """The next batch of the epoch ``iter(reader)`` started (one is started if none is):
        Paddle's ``reader.next()``; StopIteration at the epoch's end."""
        if not self.iterable:
            raise DataLoaderError("next() is for iterable readers; a reader built with "
                                  "iterable=False feeds exe.run itself (start/reset)")
        if self._epoch is None:
            self()
        try:
            return next(self._epoch)
        except StopIteration:
            self.reset()
            raise

    __next__ = next


def _as_declared(stacked: np.ndarray, var: Variable) -> np.ndarray:
    """Samples of another rank than ``var`` reshaped to its shape when it has at most one
    unknown dim and the sizes agree, as Paddle's DataFeeder does for sample lists (a reader
    yielding a whole batch [8] as one sample of a [-1] variable)."""
    shape = [int(d) for d in (var.shape or ())]
    if stacked.ndim == len(shape) or sum(d < 0 for d in shape) > 1 or not shape:
        return stacked
    known = int(np.prod([d for d in shape if d >= 0])) if any(d >= 0 for d in shape) else 1
    if known == 0 or stacked.size % known or (-1 not in shape and stacked.size != known):
        return stacked  # to_feed_array explains the mismatch
    return stacked.reshape(shape)


class _QueueView:
    """The read side of a loader's batch queue, as Paddle's LoDTensorBlockingQueue shows it."""

    def __init__(self, loader):
        self._loader = loader

    def size(self) -> int:
        epoch = self._loader._epoch
        if epoch is None:
            return 0
        n = epoch.queue.qsize()
        # a finished reading thread's last item is the end-of-epoch marker, not a batch
        return n - 1 if n and not epoch.thread.is_alive() else n

    def capacity(self) -> int:
        return self._loader.capacity

    def is_closed(self) -> bool:
        epoch = self._loader._epoch
        return epoch is None or epoch.done
