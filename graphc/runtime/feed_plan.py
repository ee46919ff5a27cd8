"""The feed plan of a prepared program: feed checks (names, dtypes, shapes), stacking K
iterations, joining per-device feed lists, LoD packing, and the cache of accepted feed keys.

A run whose feed dict holds arrays of a (names, types, dtypes, shapes) already accepted
takes the cached plan: the checks are functions of exactly that key, so their verdict and
the compiled step are looked up, not recomputed (benchmarks/bench_step_overhead.py).
Values that are not arrays convert through runtime/feeds.py; LoD feeds pack through
runtime/lod.py.
"""

from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from ..backends.precision import is_narrowed
from ..ir.graph import Graph
from ..ir.types import dims_compatible
from .feeds import FeedError, convert_feed
from .lod import PackedLoD, concat_lod, feed_signature, pack_feeds
from .lod_pack import PackedFeeds, pack_level1

__all__ = ["FeedPlan", "feed_key"]

_ARRAY_TYPES = (np.ndarray, jax.Array)
_PLANS_PER_PROGRAM = 64  # cached feed keys per prepared program (cleared when exceeded)


def feed_key(feed: dict) -> tuple | None:
    """What the feed checks of a dict of arrays depend on: each feed's name, type, dtype and
    shape (None when a value is not array-like: it takes the full checks every time)."""
    try:
        return tuple([(name, type(v), v.dtype, v.shape) for name, v in feed.items()])
    except AttributeError:
        return None


def _sig_text(sig: tuple) -> str:
    return ", ".join(f"'{n}' {list(shape)}" for n, shape in sig) or "no feeds"


class FeedPlan:
    """The feed variables of one lowered program and the feed dicts it accepted.

    ``feeds``: feed var name -> graph input Value (the used ones); ``devices``: the
    data-parallel devices (None: one device), of which this process feeds ``feed_parts``
    (its batch splits over them); ``plans``: (fetch names, feed_key) -> (signature, step,
    the step's run plan).
    """

    def __init__(self, graph: Graph, devices: list | None = None, feed_parts: int = 1):
        self.graph = graph
        self.feeds = {v.var.name: v for v in graph.inputs if v.var.kind == "feed"}
        self.feed_dtypes = {n: jnp.dtype(v.type.dtype) for n, v in self.feeds.items()}
        self.read_feeds = [n for n, v in self.feeds.items() if graph.nx.succ[v]]
        self.devices, self.feed_parts = devices, feed_parts
        self.plans: dict[tuple, tuple] = {}

    def remember(self, key: tuple, feed: dict, arrays: dict, plan: tuple) -> None:
        """Cache ``plan`` (signature, step, run plan) for ``key`` when the checks took every
        array as it was given (nothing converted), so a later run may skip them."""
        if key[1] is not None and all(arrays[n] is v for n, v in feed.items()):
            if len(self.plans) >= _PLANS_PER_PROGRAM:
                self.plans.clear()
            self.plans[key] = plan

    # -- checks ------------------------------------------------------------------------
    def check(self, program, feed, iterations: int = 1) -> tuple[dict, tuple]:
        """Checked feed arrays and their signature; with ``iterations = K > 1`` every array
        carries K steps on a new leading axis (a list of K dicts is stacked into that)."""
        if isinstance(feed, list | tuple) and any(isinstance(f, dict) for f in feed):
            if iterations == 1 and self.devices:
                return self._per_device(program, feed)
            if iterations == 1 and len(feed) == 1 and isinstance(feed[0], Mapping):
                # Paddle's: an iterable loader on one place yields [feed dict]
                return self.check_dict(program, dict(feed[0]), None)
            if iterations == 1:
                raise FeedError(f"got a list of {len(feed)} feed dicts, but this program runs "
                                "one iteration per call; give one dict, or run a "
                                "CompiledProgram whose exec_strategy.num_iteration_per_run "
                                f"is {len(feed)}")
            return self._stacked(program, feed, iterations)
        if iterations > 1 and feed is not None and not isinstance(feed, Mapping):
            raise FeedError(f"num_iteration_per_run is {iterations}: feed must be a list of "
                            f"{iterations} feed dicts or a dict of arrays stacked on a new "
                            f"leading axis of {iterations}, got {type(feed).__name__}")
        return self.check_dict(program, dict(feed or {}), iterations if iterations > 1 else None)

    def _per_device(self, program, feeds):
        """Paddle's per-device feed list: one dict per device, joined into one global batch
        (device i gets dict i's samples)."""
        n = self.feed_parts
        if len(feeds) != n:
            raise FeedError(f"got a list of {len(feeds)} feed dicts for {n} devices; give one "
                            "dict per device, or one dict whose batch splits evenly")
        checked = []
        for i, feed in enumerate(feeds):
            if not isinstance(feed, dict):
                raise FeedError(f"feed list item {i} is a {type(feed).__name__}, not a dict")
        # LoD feeds: the devices' sequences joined, then packed with device i's in block i
        lod = {n: concat_lod(n, [f[n] for f in feeds]) for n in feeds[0]
               if n in self.feeds and self.feeds[n].type.lod_level}
        for i, feed in enumerate(feeds):
            dense = {n: v for n, v in feed.items() if n not in lod} if lod else feed
            try:
                checked.append(self.check_dict(program, dense, None, split=False,
                                               elsewhere=tuple(lod)))
            except FeedError as exc:
                raise FeedError(f"feed dict of device {i}: {exc}") from None
        first = checked[0][1]
        for i, (_, sig) in enumerate(checked[1:], 1):
            if sig != first:
                raise FeedError(f"the feed dicts of devices 0 and {i} differ in names or shapes "
                                f"({_sig_text(first)} vs {_sig_text(sig)}); every device must "
                                "get the same amount of data")
        arrays = {name: np.concatenate([np.asarray(c[0][name]) for c in checked])
                  for name in checked[0][0]}
        arrays.update(pack_feeds({name: (tensor, self.feeds[name].type,
                                         self.feed_dtypes[name]) for name, tensor in lod.items()},
                                 n))
        sig = tuple((n_, feed_signature(a)) for n_, a in sorted(arrays.items()))
        return arrays, sig

    def _stacked(self, program, feeds, iterations: int):
        if len(feeds) != iterations:
            raise FeedError(f"num_iteration_per_run is {iterations} but {len(feeds)} feed "
                            "dicts were given")
        checked = []
        for i, feed in enumerate(feeds):
            if not isinstance(feed, dict):
                raise FeedError(f"feed list item {i} is a {type(feed).__name__}, not a dict")
        # LoD feeds: the K batches packed into one common bucket and stacked (runtime/lod.py)
        lod = [n for n in feeds[0] if n in self.feeds and self.feeds[n].type.lod_level]
        for i, feed in enumerate(feeds):
            dense = {n: v for n, v in feed.items() if n not in lod} if lod else feed
            try:
                checked.append(self.check_dict(program, dense, None, elsewhere=tuple(lod)))
            except FeedError as exc:
                raise FeedError(f"feed dict {i} of {iterations}: {exc}") from None
        first = checked[0][1]
        for i, (_, sig) in enumerate(checked[1:], 1):
            if sig != first:
                raise FeedError(f"feed dicts 0 and {i} differ in names or shapes "
                                f"({_sig_text(first)} vs {_sig_text(sig)}); the {iterations} "
                                "iterations of one call are stacked, so they must agree")
        arrays = {}
        for name in checked[0][0]:
            items = [c[0][name] for c in checked]
            stack = jnp.stack if any(isinstance(a, jax.Array) for a in items) else np.stack
            arrays[name] = stack(items)
        sig = [(n, (iterations, *shape)) for n, shape in first]
        for name in lod:
            if any(name not in f for f in feeds):
                raise FeedError(f"feed '{name}' is missing from some of the {iterations} "
                                "feed dicts of one call")
        packed = self._lod_feeds({name: [f[name] for f in feeds] for name in lod}, iterations)
        arrays.update(packed)
        sig.extend((name, feed_signature(a)) for name, a in packed.items())
        return arrays, tuple(sorted(sig))

    def check_dict(self, program, feed: dict, iterations: int | None, split: bool = True,
                   elsewhere: tuple = ()) -> tuple[dict, tuple]:
        """One feed dict checked against the program's data variables: (arrays, signature).
        ``iterations``: K stacked on a leading axis (None: one); ``split``: the batch must
        split over this process's devices; ``elsewhere``: LoD feeds checked by the caller."""
        arrays, lod = {}, {}
        dtypes = self.feed_dtypes
        for name, value in feed.items():
            target = self.feeds.get(name)
            if target is None:
                if name in self.graph.vars or program.global_block().has_var(name):
                    raise FeedError(f"feed '{name}' is not a data variable of the program "
                                    "(only variables declared with graphc.data are fed)")
                raise FeedError(f"feed '{name}' is not a variable of the program; data "
                                f"variables are: {sorted(self.feeds) or 'none'}")
            want = target.type
            if want.lod_level:  # packed into a shared size bucket below (runtime/lod.py)
                lod[name] = value
                continue
            if isinstance(value, _ARRAY_TYPES):
                arr = value
                if arr.dtype != dtypes[name] and isinstance(arr, jax.Array) and \
                        is_narrowed(arr.dtype, dtypes[name]):
                    arr = arr.astype(dtypes[name])  # made by JAX without x64
                if arr.dtype != dtypes[name]:
                    raise FeedError(f"feed '{name}' has dtype {arr.dtype} but the program "
                                    f"declares {want.dtype}")
            else:
                arr = convert_feed(name, value, dtypes[name])
            shape = arr.shape
            if iterations:
                if not shape or shape[0] != iterations:
                    raise FeedError(
                        f"feed '{name}' has shape {list(shape)} but num_iteration_per_run is "
                        f"{iterations}: stack the iterations on a new leading axis, shape "
                        f"[{iterations}, {', '.join(map(str, want.shape))}], or give a list "
                        f"of {iterations} feed dicts")
                shape = shape[1:]
            if not dims_compatible(shape, want.shape):
                per = " per iteration" if iterations is not None else ""
                raise FeedError(f"feed '{name}' has shape {list(shape)}{per} but the program "
                                f"declares {list(want.shape)} (-1 matches any size)")
            if split and self.devices and (not shape or shape[0] % self.feed_parts):
                n = self.feed_parts
                raise FeedError(f"feed '{name}' has batch {shape[0] if shape else '(scalar)'}, "
                                f"which does not split evenly over {n} devices; every device "
                                f"must get the same amount of data (a multiple of {n}), or "
                                f"give a list of {n} feed dicts, one per device")
            if 0 in shape:
                raise FeedError(f"feed '{name}' has shape {list(shape)}: an empty batch; a step "
                                "needs at least one sample (skip empty batches)")
            arrays[name] = arr
        stack = None
        if lod:
            packed = self._lod_feeds(lod, iterations)
            arrays.update(packed)
            stack = packed.stack if type(packed) is PackedFeeds else None
        for name in self.read_feeds:
            if name not in arrays and name not in elsewhere:  # (LoD feeds of a feed list)
                raise FeedError(f"missing feed '{name}' ({self.feeds[name].type}); the "
                                "program reads it")
        if stack is None:
            return arrays, tuple((n, feed_signature(a)) for n, a in sorted(arrays.items()))
        rows = frozenset(stack[0])  # rows of one buffer: one signature for them all
        one = feed_signature(arrays[stack[0][0]])
        sig = tuple((n, one if n in rows else feed_signature(a))
                    for n, a in sorted(arrays.items()))
        return PackedFeeds(arrays, stack), sig

    def _lod_feeds(self, values: dict, iterations: int | None = None) -> dict:
        """The LoD feeds of one step ({name: value}) as the step's LoDArrays, packed into
        buckets they share (runtime/lod.py's ``pack_feeds``); under data parallelism each
        device gets whole sequences; with K iterations per call, each value is a list of K
        batches (docs/lod.md). A PackedLoD (a DataLoader's) that fits is taken as it is."""
        parts = self.feed_parts if self.devices else 1
        out, items = {}, {}
        for name, value in values.items():
            if self.devices and self.feed_parts != len(self.devices):
                raise FeedError(f"feed '{name}' is a LoD feed: multi-process data-parallel "
                                "runs do not take LoD feeds yet (the processes would have to "
                                "agree on a bucket every step); run LoD programs in one "
                                "process")
            want, dtype = self.feeds[name].type, self.feed_dtypes[name]
            if isinstance(value, PackedLoD):  # packed ahead of time by a DataLoader
                packed = value.check(name, want, dtype, parts, iterations or 1)
                if packed is not None:
                    out[name] = packed
                    continue
                value = value.source  # packed for another placement: pack its batches again
            if iterations and (not isinstance(value, list | tuple) or len(value) != iterations):
                raise FeedError(f"feed '{name}' is a LoD feed and num_iteration_per_run is "
                                f"{iterations}: give a list of {iterations} LoDTensors (or a "
                                f"list of {iterations} feed dicts), got "
                                f"{type(value).__name__}")
            items[name] = (list(value) if iterations else value, want, dtype)
        if items:
            # the common case (one device, one iteration, lod_level 1) in one vectorised pass
            fast = pack_level1(items) if parts == 1 and not iterations else None
            if fast is not None and not out:
                return fast  # (a PackedFeeds when its feeds share one buffer)
            out.update(fast if fast is not None else pack_feeds(items, parts, iterations or None))
        return out
