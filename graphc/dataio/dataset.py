"""Datasets over text files, and ``Executor.train_from_dataset`` / ``infer_from_dataset``.

``graphc.DatasetFactory().create_dataset("InMemoryDataset" | "QueueDataset")`` (or the
classes directly), then ``set_use_var([x, label])``, ``set_filelist([...])``,
``set_batch_size(n)``, ``set_thread(t)``; ``exe.train_from_dataset(main, dataset,
fetch_list=[loss], print_period=100)`` runs one step per batch.

File format
-----------
UTF-8 text, one sample per line, tokens separated by whitespace; blank lines are skipped.
For each variable of ``set_use_var``, in that order, a line holds a count ``n`` followed by
``n`` values. ``n`` must equal the number of values in one sample of that variable: the
product of its shape after the batch dimension (1 for ``[-1, 1]``, 4 for ``[-1, 2, 2]``,
row-major); every dimension after the batch one must be known. Values of integer variables
are parsed as integers, of float variables as floats. For ``x: [-1, 3] float32`` and
``label: [-1, 1] int64`` the line ``3 0.5 -1 2e-3 1 7`` is the sample
``x = [0.5, -1.0, 0.002], label = [7]``. Nothing else may follow the last variable's values.
A line that breaks these rules raises ``DatasetError`` naming ``file:line``.

Variable-length slots (Paddle's MultiSlot format): a variable declared with ``lod_level=1``
(``fluid.data("C1", [-1, 1], "int64", lod_level=1)``) takes any positive count of values on
each line, a multiple of one token's size (1 for ``[-1, 1]``): that sample's sequence. Its
batches are LoDTensors, one sequence per sample (docs/lod.md), which the executor packs into
size buckets. As in Paddle, a count of 0 is an error (pad the slot, e.g. with id 0); slots of
``lod_level=2`` cannot be written in this format.

Order
-----
Samples are taken file by file in ``set_filelist`` order, and line by line within a file,
whatever ``set_thread`` is (threads read files in parallel; their results are used in
file order). Batches are ``batch_size`` consecutive samples; the last, shorter batch is kept
(except under a data-parallel program, where it is dropped when it does not split evenly
over the devices). ``InMemoryDataset.local_shuffle(seed)`` reorders the loaded samples by
``numpy.random.default_rng(seed).permutation(n)``: sample ``i`` of the shuffled order is
loaded sample ``perm[i]``; the same seed gives the same order.

- ``InMemoryDataset``: ``load_into_memory()`` reads every file (``thread`` files at a time)
  into one array per variable; epochs slice those arrays; ``local_shuffle`` /
  ``global_shuffle`` (one process: the same) reorder them; ``release_memory()`` drops them.
- ``QueueDataset``: streams; each epoch ``thread`` reader threads parse files (file ``i`` by
  thread ``i % thread``) into small bounded queues, consumed in file order, so memory holds
  only a few chunks per file being read. A file missing when its turn comes is an error.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..ir.program import Variable
from .dataset_options import BaseOptions, InMemoryOptions, check_int
from .io import DataLoader
from .multislot import (
    DatasetError,
    _batch,
    _columns,
    _concat,
    _Ragged,
    _read_lines,
    _Slot,
)
from .pipe import DEFAULT_PIPE_TIMEOUT_S

__all__ = ["DatasetError", "DatasetFactory", "InMemoryDataset", "QueueDataset",
           "train_from_dataset", "infer_from_dataset"]

class QueueShuffleError(DatasetError, NotImplementedError):
    """``QueueDataset.local_shuffle``/``global_shuffle``: Paddle raises NotImplementedError."""


_POLL_S = 0.05
_CHUNK = 256  # samples per chunk a QueueDataset reader hands over
_DEPTH = 4  # chunks a reader may be ahead per file


class DatasetBase(BaseOptions):
    """What both datasets share: configuration, and batches in order."""

    def __init__(self):
        self._init_base_options()
        self.filelist: list[str] = []
        self.batch_size = 1
        self.thread_num = 1
        self.use_vars: list[Variable] = []
        self.pipe_command = "cat"
        self.pipe_command_timeout = DEFAULT_PIPE_TIMEOUT_S

    def run_with_executor(self, exe, program, scope, thread: int, debug: bool, fetch_list,
                          fetch_info, print_period: int, fetch_handler, desc: str):
        """``exe.train_from_dataset`` / ``exe.infer_from_dataset`` (``desc``: "train" or
        "infer") dispatch here, so the runtime never imports this module."""
        run = train_from_dataset if desc == "train" else infer_from_dataset
        return run(exe, program, self, scope, thread, debug, fetch_list, fetch_info,
                   print_period, fetch_handler)

    def set_filelist(self, filelist) -> None:
        """The data files, read in this order."""
        if isinstance(filelist, str | os.PathLike):
            filelist = [filelist]
        self.filelist = [os.fspath(f) for f in filelist]

    def set_batch_size(self, batch_size: int) -> None:
        if int(batch_size) < 1:
            raise DatasetError(f"batch_size must be at least 1, got {batch_size}")
        self.batch_size = int(batch_size)

    def set_thread(self, thread_num: int) -> None:
        """Reader threads, each reading (and piping) its own files in parallel; the sample
        order does not change."""
        self.thread_num = check_int("thread_num", thread_num)

    def set_use_var(self, var_list) -> None:
        """The data variables each line holds, in line order (see the file format)."""
        var_list = list(var_list)
        if not var_list or not all(isinstance(v, Variable) for v in var_list):
            raise DatasetError("set_use_var expects a non-empty list of data Variables")
        self._slots = [_Slot(v) for v in var_list]
        self.use_vars = var_list

    def set_pipe_command(self, pipe_command) -> None:
        """Feed each file to this shell command (stdin) and read its output lines instead
        (a ``fluid.incubate.data_generator`` script, as PaddleRec does); ``cat`` reads the
        files directly. See graphc/dataio/pipe.py for timeouts and failures."""
        if not isinstance(pipe_command, str):
            raise DatasetError(f"pipe_command must be a shell command string, got "
                               f"{type(pipe_command).__name__}")
        self.pipe_command = pipe_command

    def set_pipe_command_timeout(self, seconds) -> None:
        """graphc's limit on one file's pipe command (default an hour)."""
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds <= 0:
            raise DatasetError(f"the pipe command timeout must be a positive number of "
                               f"seconds, got {seconds!r}")
        self.pipe_command_timeout = float(seconds)

    def _pipe(self):
        command = self.pipe_command.strip()
        if self.download_cmd:  # Paddle's ``download_cmd file | pipe_command``
            return (command if command not in ("", "cat") else None,
                    self.pipe_command_timeout, self.download_cmd)
        return None if command in ("", "cat") else (command, self.pipe_command_timeout, None)

    def _line_prefix(self) -> int:
        return 0

    def _samples(self, path, stop=None):
        return _read_lines(path, self._slots, stop, pipe=self._pipe(),
                           prefix=self._line_prefix())

    def desc(self) -> str:
        """The data feed description (Paddle's DataFeedDesc prototxt) of this dataset."""
        from .data_feed_desc import dataset_desc
        return dataset_desc(self)

    def _check_ready(self) -> None:
        if not self.use_vars:
            raise DatasetError("call set_use_var([...]) before reading the dataset")
        if not self.filelist:
            raise DatasetError("call set_filelist([...]) before reading the dataset")

    def _batches(self, parts: int = 1):  # pragma: no cover - abstract
        raise NotImplementedError

    def _num_batches(self, parts: int = 1) -> int | None:
        return None

    def _rebatch(self, chunks, parts: int):
        """Batches of ``batch_size`` from a stream of per-variable chunk arrays."""
        bs, pending, have = self.batch_size, [], 0
        for chunk in chunks:
            pending.append(chunk)
            have += len(chunk[0])
            while have >= bs:
                cols = [_concat([c[k] for c in pending]) for k in range(len(chunk))]
                yield _batch([c[:bs] for c in cols])
                rest = [c[bs:] for c in cols]
                pending, have = ([rest], len(rest[0])) if len(rest[0]) else ([], 0)
        if have and have % parts == 0:
            yield _batch([_concat([c[k] for c in pending]) for k in range(len(pending[0]))])


class InMemoryDataset(InMemoryOptions, DatasetBase):
    """Loads every file into memory (``load_into_memory``); can shuffle (``local_shuffle``)."""

    def __init__(self):
        super().__init__()
        self._init_options()
        self._data: list[np.ndarray] | None = None
        self._order: np.ndarray | None = None

    def load_into_memory(self) -> None:
        """Read and parse every file, ``thread`` at a time; samples keep file/line order."""
        self._check_ready()
        slots = self._slots

        def load(path):
            samples = list(self._samples(path))
            return _columns(samples, slots) if samples else None

        with ThreadPoolExecutor(self.thread_num,
                                thread_name_prefix="graphc-InMemoryDataset-load") as pool:
            futures = [pool.submit(load, p) for p in self.filelist]
            try:
                parts = [f.result() for f in futures]
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
        parts = [p for p in parts if p is not None]
        if parts:
            self._data = [_concat([p[k] for p in parts]) for k in range(len(slots))]
        else:
            self._data = [_Ragged(np.zeros((0, *s.sample_shape), s.dtype),
                                  np.zeros(0, np.int64)) if s.lod else
                          np.zeros((0, *s.sample_shape), s.dtype) for s in slots]
        self._order = None

    def local_shuffle(self, seed: int = 0) -> None:
        """Reorder the loaded samples by ``default_rng(seed).permutation`` (see module doc)."""
        self._require_loaded()
        self._order = np.random.default_rng(seed).permutation(len(self._data[0]))

    def global_shuffle(self, fleet=None, thread_num: int = 12, seed: int = 0) -> None:
        """One process holds all the data: the same as ``local_shuffle(seed)``."""
        self.local_shuffle(seed)

    def release_memory(self) -> None:
        self._data, self._order = None, None

    def get_memory_data_size(self, fleet=None) -> int:
        self._require_loaded()
        return len(self._data[0])

    get_shuffle_data_size = get_memory_data_size

    def _require_loaded(self) -> None:
        if self._data is None:
            raise DatasetError("the InMemoryDataset is not loaded: call load_into_memory() "
                               "first")

    def _num_batches(self, parts: int = 1) -> int:
        self._require_loaded()
        n, bs = len(self._data[0]), self.batch_size
        last = n % bs
        return n // bs + (1 if last and last % parts == 0 else 0)

    def _batches(self, parts: int = 1):
        self._require_loaded()
        data, order, bs = self._data, self._order, self.batch_size
        n = len(data[0])
        for start in range(0, n, bs):
            stop = min(start + bs, n)
            if (stop - start) % parts:
                return
            if order is None:
                yield _batch([d[start:stop] for d in data])
            else:
                idx = order[start:stop]
                yield _batch([d[idx] for d in data])


class QueueDataset(DatasetBase):
    """Streams the files every epoch with ``thread`` reader threads (see the module doc)."""

    def local_shuffle(self):
        """Paddle's QueueDataset cannot shuffle (it raises NotImplementedError); neither can
        graphc's: DatasetError, which is a NotImplementedError here too."""
        raise QueueShuffleError("QueueDataset does not support local shuffle; use "
                                "InMemoryDataset (load_into_memory, then local_shuffle)")

    def global_shuffle(self, fleet=None):
        raise QueueShuffleError("QueueDataset does not support global shuffle; use "
                                "InMemoryDataset (load_into_memory, then global_shuffle)")

    def _batches(self, parts: int = 1):
        self._check_ready()
        slots, files = self._slots, list(self.filelist)
        stop = threading.Event()
        queues = [queue.Queue(maxsize=_DEPTH) for _ in files]
        end = object()

        def put(q, item) -> bool:
            while not stop.is_set():
                try:
                    q.put(item, timeout=_POLL_S)
                    return True
                except queue.Full:
                    continue
            return False

        def reader(t: int) -> None:
            for i in range(t, len(files), self.thread_num):
                try:
                    buf = []
                    for sample in self._samples(files[i], stop):
                        buf.append(sample)
                        if len(buf) == _CHUNK:
                            if not put(queues[i], _columns(buf, slots)):
                                return
                            buf = []
                    if buf and not put(queues[i], _columns(buf, slots)):
                        return
                    if not put(queues[i], end):
                        return
                except BaseException as exc:
                    put(queues[i], exc)
                    return

        threads = [threading.Thread(target=reader, args=(t,), daemon=True,
                                    name=f"graphc-QueueDataset-reader-{t}")
                   for t in range(min(self.thread_num, len(files)))]
        for th in threads:
            th.start()

        def chunks():
            for q in queues:
                while True:
                    item = q.get()
                    if item is end:
                        break
                    if isinstance(item, BaseException):
                        raise item
                    yield item

        try:
            yield from self._rebatch(chunks(), parts)
        finally:
            stop.set()
            for th in threads:
                th.join(5.0)


class DatasetFactory:
    """``DatasetFactory().create_dataset("InMemoryDataset" | "QueueDataset")``."""

    _KINDS = {"InMemoryDataset": InMemoryDataset, "QueueDataset": QueueDataset}

    def create_dataset(self, datafeed_class: str = "QueueDataset") -> DatasetBase:
        try:
            return self._KINDS[datafeed_class]()
        except KeyError:
            raise DatasetError(f"unknown dataset {datafeed_class!r}; expected one of "
                               f"{sorted(self._KINDS)}") from None


# -- Executor.train_from_dataset / infer_from_dataset ------------------------------------------
def _format(value) -> str:
    arr = np.asarray(value)
    if arr.size == 1:
        return f"{arr.reshape(()).item():.6g}"
    return np.array2string(arr, precision=6, threshold=8)


def run_from_dataset(exe, program, dataset, scope=None, debug: bool = False, fetch_list=None,
                     fetch_info=None, print_period: int = 100, desc: str = "train",
                     file=None):
    """Run ``program`` once per batch of ``dataset`` (fed through a prefetching DataLoader),
    with a tqdm progress bar and, every ``print_period`` steps, one line of the fetched
    values labelled by ``fetch_info``. Returns the last step's fetched values (numpy)."""
    from tqdm import tqdm

    from ..ir.default_programs import default_main_program
    from ..runtime.compiled_program import CompiledProgram

    if not isinstance(dataset, DatasetBase):
        raise DatasetError(f"dataset must be an InMemoryDataset or QueueDataset, got "
                           f"{type(dataset).__name__}")
    dataset._check_ready()
    program = default_main_program() if program is None else program
    fetch_list = list(fetch_list or [])
    names = [getattr(f, "name", f) for f in fetch_list]
    fetch_info = list(fetch_info) if fetch_info is not None else names
    if len(fetch_info) != len(fetch_list):
        raise DatasetError(f"fetch_info has {len(fetch_info)} labels for {len(fetch_list)} "
                           "fetch_list entries")
    if int(print_period) < 1:
        raise DatasetError(f"print_period must be at least 1, got {print_period}")
    compiled = program if isinstance(program, CompiledProgram) else None
    parts = len(compiled.devices) if compiled is not None and compiled.devices else 1
    k = compiled.exec_strategy.num_iteration_per_run if compiled is not None else 1
    loader = DataLoader.from_generator(feed_list=dataset.use_vars, capacity=2)
    loader.set_batch_generator(lambda: dataset._batches(parts),
                               places=compiled if compiled is not None else exe.place)
    total = dataset._num_batches(parts)
    out = file if file is not None else sys.stdout
    fetched = None
    bar = tqdm(total=None if total is None else total // k, desc=desc, unit="step",
               disable=None, leave=False)
    try:
        for step, feed in enumerate(loader(), 1):
            t0 = time.perf_counter()
            fetched = exe.run(program, feed=feed, fetch_list=fetch_list, scope=scope)
            bar.update(1)
            if fetch_list and (step % print_period == 0 or debug):
                line = f"{desc} step {step}: " + ", ".join(
                    f"{info}={_format(v)}" for info, v in zip(fetch_info, fetched))
                if debug:
                    line += f" ({(time.perf_counter() - t0) * 1e3:.1f} ms)"
                tqdm.write(line, file=out)
    finally:
        bar.close()
        loader.reset()
    return fetched


def train_from_dataset(exe, program=None, dataset=None, scope=None, thread: int = 0,
                       debug: bool = False, fetch_list=None, fetch_info=None,
                       print_period: int = 100, fetch_handler=None):
    """``Executor.train_from_dataset``: see ``run_from_dataset``. ``thread`` > 0 overrides
    the dataset's reader threads; ``fetch_handler`` is not supported."""
    if fetch_handler is not None:
        raise DatasetError("fetch_handler is not supported; use fetch_list/print_period")
    if thread:
        dataset.set_thread(thread)
    return run_from_dataset(exe, program, dataset, scope, debug, fetch_list, fetch_info,
                            print_period, "train")


def infer_from_dataset(exe, program=None, dataset=None, scope=None, thread: int = 0,
                       debug: bool = False, fetch_list=None, fetch_info=None,
                       print_period: int = 100, fetch_handler=None):
    """``Executor.infer_from_dataset``: runs ``program`` (a test/inference program) over the
    dataset like ``train_from_dataset``."""
    if fetch_handler is not None:
        raise DatasetError("fetch_handler is not supported; use fetch_list/print_period")
    if thread:
        dataset.set_thread(thread)
    return run_from_dataset(exe, program, dataset, scope, debug, fetch_list, fetch_info,
                            print_period, "infer")



# An empty package path: ``import graphc.dataset.mnist`` (``import paddle.dataset.mnist``)
# then reaches graphc.fluid's import hook, which explains, instead of "not a package".
__path__: list[str] = []


def __getattr__(name: str):
    # ``import graphc as paddle``: paddle.dataset.mnist & co. are Paddle's download datasets
    # (this module is the Dataset API): read from Paddle's cache where graphc can, else explain.
    from ..fluid._missing import download_dataset
    return download_dataset(name)
