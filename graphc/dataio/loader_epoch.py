"""The DataLoader's machinery (graphc.io): each epoch's producer thread converts batches to
the feed variables' dtypes and shapes, places them on the device(s) and hands them over."""

from __future__ import annotations

import itertools
import math
import queue
import threading
import time

import jax
import numpy as np

from ..backends.precision import with_graphc_x64
from ..ir.errors import GraphcError
from ..ir.program import Variable
from ..ir.types import dims_compatible
from ..runtime.devices import place_devices
from ..runtime.places import Place

_POLL_S = 0.05  # how often a blocked put/get looks whether it should give up
_JOIN_S = 5.0  # how long reset() waits for the thread (a generator stuck in user code)
_counter = itertools.count()


class DataLoaderError(GraphcError):
    """A generator raised, or produced a batch that does not fit the feed variables."""


class EOFException(GraphcError):
    """A started non-iterable DataLoader (``iterable=False``) has no batch left for
    ``exe.run``: the epoch is over (``fluid.core.EOFException``; call ``loader.reset()``)."""


class _End:
    """The thread's last item: the epoch is complete."""


class _Replicas(list):
    """An item of one batch per place (places that repeat a device)."""


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
    if arr.dtype.kind in "US":  # numeric strings, parsed as Paddle's feeders do
        from ..runtime.feed_columns import numbers_from_strings
        from ..runtime.feeds import FeedError
        try:
            arr = numbers_from_strings(arr, want, f"{what}: variable '{var.name}'")
        except FeedError as exc:
            raise DataLoaderError(str(exc)) from None
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


def to_lod_tensor(value, var: Variable, what: str):
    """A LoD variable's batch as a LoDTensor: given one (its level must match) or built from
    a list of variable-length samples (sequences of tokens; nested two deep for
    ``lod_level=2``), as a DataFeeder does. DataLoaderError names ``var`` and ``what``."""
    from ..runtime.feed_columns import LoDColumn
    from ..runtime.feeds import FeedError
    from ..runtime.lod import LoDTensor
    if isinstance(value, LoDTensor):
        if len(value._lengths) != var.lod_level:
            raise DataLoaderError(f"{what}: variable '{var.name}' is declared with lod_level="
                                  f"{var.lod_level} but got a LoDTensor with "
                                  f"{len(value._lengths)} level(s)")
        return value
    if isinstance(value, np.ndarray) or not isinstance(value, list | tuple):
        raise DataLoaderError(f"{what}: variable '{var.name}' is a LoD variable (lod_level="
                              f"{var.lod_level}): give a LoDTensor or a list of "
                              f"variable-length samples, not a {type(value).__name__}")
    value = list(value)
    fast = _flat_sequences(value, var, what)
    if fast is not None:
        return fast
    try:
        return LoDColumn(var).batch(value)
    except (FeedError, ValueError, TypeError) as exc:
        raise DataLoaderError(f"{what}: variable '{var.name}': {exc}") from None


def _flat_sequences(samples: list, var: Variable, what: str):
    """The common case fast (lod_level 1, one number per token: id slots): the samples'
    tokens joined in one pass; None for anything else (the DataFeeder's general walk)."""
    from ..runtime.lod import LoDTensor
    shape = tuple(var.shape or ())
    if var.lod_level != 1 or math.prod(d for d in shape[1:]) != 1 or any(
            d < 0 for d in shape[1:]):
        return None
    try:
        lengths = [len(s) for s in samples]
    except TypeError:
        return None
    if not sum(lengths) or any(isinstance(s, str | bytes) for s in samples):
        return None
    flat = np.asarray(list(itertools.chain.from_iterable(samples)))
    if flat.ndim != 1 or flat.dtype.kind not in "biuf":
        return None  # nested tokens or odd values: the general walk explains
    return LoDTensor(to_feed_array(flat.reshape((-1, *shape[1:])), var, what), [lengths])


def pack_lod_batches(feed_list: list, group: list, parts: int) -> list:
    """A group of K batches (K = 1: no stacking) as one item's values: dense arrays stacked
    on a new leading axis when K > 1 (they must agree), LoD ones packed by runtime/lod.py
    into buckets shared by all LoD variables and all K (PackedLoDs the executor takes as
    they are)."""
    from ..runtime.feeds import FeedError
    from ..runtime.lod import PackedLoD, pack_feeds
    k, out = len(group), []
    lod = {var.name: ([b[j] for b in group] if k > 1 else group[0][j], var.type,
                      _var_dtype(var)) for j, var in enumerate(feed_list) if var.lod_level}
    try:
        packed = pack_feeds(lod, parts, k if k > 1 else None) if lod else {}
    except FeedError as exc:
        raise DataLoaderError(str(exc)) from None
    for j, var in enumerate(feed_list):
        items = [b[j] for b in group]
        if var.lod_level:
            out.append(PackedLoD(packed[var.name], parts, k, items[0] if k == 1 else items))
        elif k == 1:
            out.append(items[0])
        else:
            if len({p.shape for p in items}) != 1:
                raise DataLoaderError(
                    f"variable '{var.name}' has shapes {[list(p.shape) for p in items]} in "
                    f"the {k} batches of one run (num_iteration_per_run); they are stacked, "
                    "so they must agree")
            out.append(np.stack(items))
    return out


class _Placement:
    """Where an epoch's batches go: the device or sharding, and K batches per item."""

    def __init__(self, places):
        from ..runtime.compiled_program import CompiledProgram

        self.iterations = 1
        self.target = None  # None: the default device, uncommitted
        self.parts = 1
        self.host_only = False
        # Paddle's places=[CPUPlace()]*2: a device named twice gets a batch per mention, so
        # each item is a list of that many feeds (one per place), not one split batch.
        self.replicas: list | None = None
        # Paddle's iterable loader yields a list of feed dicts, one per place, also for one
        # place (scripts take ``data[0]``; Executor.run takes the list); graphc yields that
        # list whenever places were given as Places (without them, the dict alone)
        self.per_place_list = False
        devices, inter = None, 0
        if isinstance(places, CompiledProgram):
            self.iterations = places.exec_strategy.num_iteration_per_run
            devices, inter = places.devices, places.inter_nranks
        elif isinstance(places, Place):
            devices = [places.jax_device()]
            self.per_place_list = True
        elif places is not None:
            places = list(places)
            bad = [p for p in places if not isinstance(p, Place)]
            if bad or not places:
                raise DataLoaderError("places must be a graphc Place, a list of Places, or a "
                                      f"CompiledProgram; got {places!r}")
            # cpu_places(n) after XLA started with fewer devices: n places on device 0
            devices = place_devices(places)
            self.per_place_list = len(devices) == 1
            if len(set(devices)) < len(devices):
                self.replicas = devices
                return
        if not devices:
            return
        if isinstance(places, CompiledProgram) or len(devices) > 1:
            from ..backends.jax.data_parallel import feed_sharding
            self.parts = sum(d.process_index == jax.process_index() for d in devices)
            if self.parts != len(devices):
                self.host_only = True  # several processes: the step assembles the batch
                return
            self.target = feed_sharding(devices, self.iterations, inter)
        else:
            self.target = devices[0]

    @with_graphc_x64  # on the loader's thread too: int64 labels stay int64 on the device
    def put(self, arrays: list[np.ndarray], device=None) -> list:
        from ..runtime.lod import LoDTensor, PackedLoD
        if self.host_only:
            return arrays
        if any(isinstance(a, LoDTensor | PackedLoD) for a in arrays):
            # LoD values: host LoDTensors stay for the executor to pack; packed ones go to
            # the device(s) like the dense arrays (a LoDArray is a pytree of arrays)
            dense = [a.array if isinstance(a, PackedLoD) else a for a in arrays
                     if not isinstance(a, LoDTensor)]
            placed = iter(self.put(dense, device))
            return [a if isinstance(a, LoDTensor) else
                    PackedLoD(next(placed), a.parts, a.iterations, a.source)
                    if isinstance(a, PackedLoD)
                    else next(placed) for a in arrays]
        if device is not None:
            placed = jax.device_put(arrays, device)
            jax.block_until_ready(placed)
            return placed
        placed = jax.device_put(arrays, self.target)
        jax.block_until_ready(placed)  # copy done here, on the loader's thread, not in the step
        return placed



class _Epoch:
    """One pass over the generator: the producer thread and the consumer's iterator."""

    def __init__(self, loader, placement: _Placement):  # loader: graphc.io.DataLoader
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
        if place.replicas is not None:
            return self._produce_replicas(place.replicas)
        source = self.loader._source()
        # LoD batches are packed here, on this thread, unless a non-iterable loader's
        # executor joins several batches per run (it packs them then)
        has_lod = any(v.lod_level for v in self.loader.feed_list)
        pack = has_lod and self.loader.iterable
        try:
            group = []
            for i, batch in enumerate(source):
                if self.stop.is_set():
                    return
                if parts > 1:
                    for var, arr in zip(self.loader.feed_list, batch):
                        if var.lod_level:  # split by whole sequences when packed
                            continue
                        if arr.ndim == 0 or arr.shape[0] % parts:
                            raise DataLoaderError(
                                f"batch {i}: variable '{var.name}' has batch size "
                                f"{arr.shape[0] if arr.ndim else '(scalar)'}, which does not "
                                f"split evenly over {parts} devices")
                group.append(batch)
                if len(group) < k:
                    continue
                if pack:
                    try:
                        arrays = pack_lod_batches(self.loader.feed_list, group, parts)
                    except DataLoaderError as exc:
                        raise DataLoaderError(f"batches {i - k + 1}..{i}: {exc}" if k > 1
                                              else f"batch {i}: {exc}") from None
                elif k == 1:
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

    def _produce_replicas(self, devices: list) -> None:
        """One item per len(devices) batches: a list with batch i on device i."""
        source = self.loader._source()
        try:
            group = []
            for batch in source:
                if self.stop.is_set():
                    return
                group.append(batch)
                if len(group) < len(devices):
                    continue
                item = _Replicas(self.placement.put(b, d) for b, d in zip(group, devices))
                group = []
                if not self._put(item):
                    return
            if group and not self.loader.drop_last:
                raise DataLoaderError(
                    f"the epoch ended with {len(group)} batch(es), fewer than the "
                    f"{len(devices)} places that take one each; use drop_last=True to drop "
                    "them")
            self._put(_End)
        except BaseException as exc:  # handed to the consumer, raised from next()
            self._put(_Failure(exc))
        finally:
            source.close()

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
        if isinstance(item, _Replicas):
            return [list(b) if self.loader.return_list else dict(zip(self.names, b))
                    for b in item]
        if self.loader.return_list:
            return list(item)
        if self.placement.per_place_list and self.loader.iterable:
            return [dict(zip(self.names, item))]
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
