"""The inference predictor's own step for a remembered signature: LoD feeds' segment ids come
from the host and embedding-id checks on fed ids run on the host, so XLA runs the model's ops.

Why: on XLA:CPU a small program's time is mostly its number of kernels. The executor's step
derives each LoD feed's segment ids on the device (a scatter and two running sums) and checks
each fed id against its table in the program (reductions and a summary output): in a 4-slot
CTR model those were most of the kernels. The predictor has the offsets on the host, where
``np.repeat`` gives the same ids in a few microseconds (and none when the offsets repeat),
and a min/max of the fed ids decides the same check; a bad id still raises the executor's
DataError, with the same culprit, value and position (``HostIdChecks``).
"""

from __future__ import annotations

import numpy as np

from ..backends.data_checks import COUNT, ITERATION, POSITION, VALUE
from ..backends.jax.step import CompiledStep
from ..backends.lod import LoDArray, given_segments
from ..backends.precision import with_graphc_x64
from .lod import bucket

__all__ = ["HostIdChecks", "InferenceStep", "StackPlan", "host_segments"]

_HOST_CHECKED = ("lookup_table",)  # ops whose data check the host repeats exactly (Ids)
_UNSIGNED = {np.dtype(f"int{b}"): np.dtype(f"uint{b}") for b in (8, 16, 32, 64)}
# LoD buffers of at most this many rows run the executor's own step (device segment ids
# and checks): at 16 rows those cost XLA:CPU nothing measurable (the 4-slot CTR step took
# the same 80 us either way) while the host's work would add ~15 us; from 32 rows on they
# cost 50-100 us (the running sums become several kernels). The stacked form (steady
# offsets) runs the own step at every size: its segment ids stay on the device between calls
DEVICE_SEGMENTS_UP_TO = 16


class InferenceStep(CompiledStep):
    """``base``'s graph and fetches compiled again; a feed argument may be a pair (its
    LoDArray, its segment ids on the host, ``host_segments``), which the step's ops use
    instead of deriving them. ``check_data`` False when every check is made on the host."""

    def __init__(self, base: CompiledStep, check_data: bool, stacked_at: tuple = ()):
        super().__init__(base.graph, base.fetch_values, donate=base.donate,
                         check_data=check_data, services=base.services)
        self.feed_shapes = base.feed_shapes
        # the stacked form (``call_stacked``): the feed positions its token rows stand for
        self.stacked_at = tuple(stacked_at)
        self._stacked_jit = (self._jit(self._traced_with_services(self._stacked))
                             if stacked_at else None)

    @with_graphc_x64
    def call_stacked(self, updated, readonly, dense: tuple, tokens, ints: tuple):
        """The step on one-level LoD feeds given as one token buffer ``[k, capacity, ...]``
        (row j: the feed at ``stacked_at[j]``) and ``ints[j]`` = (its lengths, its segment
        ids on the host, ``host_segments``), the other feeds in ``dense`` in their order.
        Why: each host array a call hands XLA costs a transfer (~2 us on XLA:CPU), while
        device arrays kept from the last call and a slice inside the program cost nothing."""
        return self._stacked_jit(tuple(updated), readonly, dense, None, tokens, ints)

    def _stacked(self, updated, readonly, dense, step, tokens, ints):
        feeds, rest, at = [], iter(dense), dict(zip(self.stacked_at, range(len(ints))))
        for i in range(len(self.feed_inputs)):
            j = at.get(i)
            if j is None:
                feeds.append(next(rest))
            else:
                lengths, segments = ints[j]
                feeds.append((LoDArray(tokens[j], (lengths,)), segments))
        return self._step(updated, readonly, tuple(feeds), step)

    def _step(self, updated, readonly, feeds, step):
        known, plain = {}, []
        for f in feeds:
            if type(f) is tuple:  # (LoDArray, segment ids): see the class doc
                lod, segments = f
                known[id(lod.lengths[-1])] = (lod.lengths[-1], segments)
                f = lod
            plain.append(f)
        with given_segments(known):
            new, created, fetched, checks = super()._step(updated, readonly, tuple(plain),
                                                          step)
        # no checks in the program: no empty summary to allocate and return either
        return new, created, fetched, checks if self.check_data else None


def host_segments(lengths: np.ndarray, capacity: int) -> np.ndarray:
    """``token_segments`` on the host: the sequence of each of ``capacity`` rows, padding
    rows ``len(lengths)`` (lengths are checked non-negative and summing to the tokens)."""
    n = lengths.shape[0]
    out = np.full(capacity, n, np.int32)
    ids = np.repeat(np.arange(n, dtype=np.int32), lengths)
    out[:ids.shape[0]] = ids
    return out


class HostIdChecks:
    """The data checks of ``step`` (traced) when each is an embedding lookup's id check on a
    fed value: per check, the feed's position in the step's feeds, the table's rows and the
    padding index. ``of(step)`` is None when any check is something else."""

    __slots__ = ("sites",)

    def __init__(self, sites: tuple):
        self.sites = sites

    @classmethod
    def of(cls, step: CompiledStep) -> HostIdChecks | None:
        graph, position = step.graph, {v: i for i, v in enumerate(step.feed_inputs)}
        sites = []
        for site in step.check_sites:
            op = site.op
            if op is None or op.type not in _HOST_CHECKED or site.slot != "Ids":
                return None
            ins = graph.op_inputs(op)
            ids, table = ins.get("Ids", [None])[0], ins.get("W", [None])[0]
            if ids not in position or table is None:
                return None
            sites.append((position[ids], int(table.type.shape[0]),
                          int(op.attrs.get("padding_idx", -1))))
        return cls(tuple(sites))

    def refused(self, args: tuple, skip=frozenset()) -> np.ndarray | None:
        """None when every id is in its table (or is the padding index); else the
        ``[checks, 4]`` summary the step's own checks would have returned (count, first bad
        value and its flat position). ``skip``: feed positions already found in range."""
        for at, rows, _ in self.sites:
            if at in skip:
                continue
            ids = _ids(args[at])
            # one reduction: as unsigned, a negative id is larger than any table
            wide = ids.view(_UNSIGNED[ids.dtype]) if ids.dtype in _UNSIGNED else ids
            if ids.size and (wide is ids and ids.min() < 0 or wide.max() >= rows):
                summary = self._summary(args)
                return summary if summary[:, COUNT].any() else None
        return None

    def _summary(self, args: tuple) -> np.ndarray:
        out = np.zeros((len(self.sites), 4), np.int64)
        for i, (at, rows, pad) in enumerate(self.sites):
            ids = _ids(args[at]).reshape(-1)
            bad = (ids < 0) | (ids >= rows)
            if pad != -1:
                bad &= ids != pad
            if bad.any():
                first = int(np.argmax(bad))
                out[i, COUNT], out[i, VALUE], out[i, POSITION] = bad.sum(), ids[first], first
                out[i, ITERATION] = 0
        return out


def _ids(arg) -> np.ndarray:
    """A step's feed argument as the array its lookup reads (a LoD feed's packed tokens)."""
    if type(arg) is tuple:
        arg = arg[0]
    return np.asarray(arg.data if isinstance(arg, LoDArray) else arg)


class StackPlan:
    """The steady zero-copy case, made cheap: every LoD feed given as tokens and offsets
    equal to its last valid ones (``Predictor``'s verdicts) is packed into one zeroed
    buffer ``[feeds, bucket, ...]`` (one allocation, one host array for the step:
    ``InferenceStep.call_stacked``) and its ids checked against every table that reads them
    with one reduction. ``names``: the LoD feeds in the step's order;
    ``limits``: per feed, the fewest rows of a table it indexes (None: no host checks);
    ``checked``: their feed positions, which ``HostIdChecks.refused`` then skips."""

    __slots__ = ("names", "limits", "limit", "checked", "shared", "dtype")

    def __init__(self, feed_names: tuple, lod_feeds: dict, host: HostIdChecks | None,
                 shared: bool):
        self.names = tuple(n for n in feed_names if n in lod_feeds)
        self.shared = shared or len(self.names) == 1
        self.limits, self.limit, self.checked = None, None, frozenset()
        self.dtype = None  # the LoD feeds' one dtype, known on the first ``tokens``
        if host is not None:
            at = {n: feed_names.index(n) for n in self.names}
            limits = [min([rows for pos, rows, _ in host.sites if pos == at[n]],
                          default=np.iinfo(np.int64).max) for n in self.names]
            self.limits = np.asarray(limits, np.uint64)
            self.checked = frozenset(at.values())
            if len(set(limits)) == 1:
                self.limit = limits[0]

    def tokens(self, feed: dict, lods: dict, verdicts: dict, dtypes: dict) -> tuple | None:
        """(one zeroed buffer ``[feeds, capacity, ...]`` holding the LoD feeds' tokens in
        ``names`` order, the verdicts used per feed), or None: not the steady case, or an id
        outside a table (the full path then packs again and refuses it exactly)."""
        if not self.shared:
            return None
        dtype = self.dtype
        if dtype is None:  # the first call: the feeds' declared dtypes, stacked only if one
            kinds = {np.dtype(dtypes[n]) for n in self.names}
            if len(kinds) != 1:
                self.shared = False
                return None
            dtype = self.dtype = kinds.pop()
        seens, datas = [], []
        trail = None
        for n in self.names:
            seen, data, off = verdicts.get(n), feed.get(n), lods.get(n)
            if (seen is None or off is None or type(data) is not np.ndarray
                    or data.shape != seen[1] or data.dtype != dtype or len(off) != 1
                    or type(off[0]) is not list or off[0] != seen[0]):
                return None
            if trail is None:
                trail = seen[2][1:]
            elif seen[2][1:] != trail:
                return None
            seens.append(seen)
            datas.append(data)
        cap = (bucket(max([s[2][0] for s in seens])) if len(seens) > 1 else seens[0][3])
        # few numpy calls: each costs microseconds beside a step that has cooled the caches
        buf = np.zeros((len(seens), cap, *trail), dtype)
        for i, data in enumerate(datas):
            shape = seens[i][2]
            buf[i, :shape[0]] = data if data.shape == shape else data.reshape(shape)
        if self.limits is not None:
            if dtype not in _UNSIGNED:
                return None
            wide = buf.view(_UNSIGNED[dtype])
            if self.limit is not None:  # one table size for all: one reduction
                flat = wide.reshape(-1)  # (argmax: a third of max's fixed cost in numpy)
                if flat[flat.argmax()] >= self.limit:
                    return None
            elif (wide.reshape(len(seens), -1).max(axis=1) >= self.limits).any():
                return None
        return buf, tuple(seens)

    def pack(self, feed: dict, lods: dict, verdicts: dict, dtypes: dict) -> dict | None:
        """``tokens`` as {name: LoDArray} (rows of its one buffer), or None."""
        got = self.tokens(feed, lods, verdicts, dtypes)
        if got is None:
            return None
        buf, seens = got
        return {n: LoDArray(buf[i], (seen[4],)) for i, (n, seen) in
                enumerate(zip(self.names, seens))}
