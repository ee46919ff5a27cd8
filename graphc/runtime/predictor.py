"""An inference program run as one compiled XLA call per input signature, its parameters held
in a scope of its own; repeated signatures skip the feed checks and call the step directly.

How a run goes: the first run of a (names, dtypes, shapes) feed signature goes through the
Executor (feed checks, the BuildStrategy's passes once per program, one compiled step per
signature, kept by the Executor). When that step is a function of its feeds and the
parameters only (it draws no random numbers, creates no state, holds no rows of a sharded
variable) the predictor remembers (step, parameter arrays) under the feed's key; a later run
with the same key calls the step with those arrays and nothing else: no dict of checks, no
state guard. State a test-mode op rewrites unchanged (batch norm's statistics) is read from
the scope and put back, as its buffers are donated. LoD feeds are packed into a size bucket
every run (runtime/lod.py, with its checks); the dense feeds beside them are not checked again.
The steady zero-copy case (every LoD feed's offsets, token shape and dtype equal to the last
ones found valid) stacks them into one buffer and reuses their lengths and segment ids on the
device (``_run_stacked``); for a signature of LoD feeds only it skips building the key.
"""

from __future__ import annotations

import threading
from operator import is_

import jax
import jax.numpy as jnp
import numpy as np

from ..backends.data_checks import COUNT
from ..backends.precision import with_graphc_x64
from ..ir.errors import GraphcError
from ..ir.program import Program
from ..ir.types import dims_compatible
from . import lod as _lod
from .executor import Executor, _raise_if_refused
from .feeds import FeedError
from .lod import LoDArray, LoDTensor, bucket, pack_feeds, unpack_fetch
from .predictor_step import (
    DEVICE_SEGMENTS_UP_TO,
    HostIdChecks,
    InferenceStep,
    StackPlan,
    host_segments,
)
from .scope import Scope

__all__ = ["Predictor", "PredictorError"]

_FAST_PER_PREDICTOR = 64  # remembered feed keys (cleared when exceeded, as the feed plans)


class PredictorError(GraphcError):
    """An inference predictor was given inputs it cannot run (a PaddleTensor whose buffer
    does not match its shape, an input name the model does not feed), or a model it cannot
    load."""


class _Fast:
    """What a remembered run needs: the step, its parameter arrays, and the feed order."""

    __slots__ = ("step", "base", "host_checks", "segments", "updated", "readonly",
                 "feed_names", "lod_feeds", "verdicts", "stack", "dtypes", "dense_names",
                 "dense_checked", "stacked_ints", "key_names")

    def __init__(self, step, readonly: tuple, lod_feeds: dict, base=None, host_checks=None,
                 segments=frozenset()):
        self.step = step
        # the executor's step, when ``step`` is the predictor's own (predictor_step.py): its
        # check sites name a refused id's culprit; host_checks: its checks made on the host
        self.base = base if base is not None else step
        self.host_checks = host_checks
        # LoD feeds whose segment ids the host computes: name -> (lengths, capacity, ids),
        # replaced whole (clones run unlocked from several threads: never read half of one)
        self.segments = {n: (None, 0, None) for n in segments}
        # state a test-mode op rewrites unchanged (batch norm's statistics): read from the
        # scope and put back each run, as its buffers are donated
        self.updated = tuple(step.updated_names)
        self.readonly = readonly
        self.feed_names = tuple(step.feed_names)
        self.lod_feeds = lod_feeds  # name -> (type, dtype) of the LoD feeds the step reads
        # name -> the last offsets (a copy), token shape and dtype found valid, with the
        # lengths and bucket they gave: the same again needs no checks (see _pack_offsets)
        self.verdicts: dict[str, tuple] = {}
        # the steady zero-copy case's packing (predictor_step.StackPlan), for own steps
        # that take their LoD feeds stacked (InferenceStep.call_stacked)
        self.stack = (StackPlan(self.feed_names, lod_feeds, host_checks,
                                _lod.SHARED_BUCKET)
                      if base is not None and getattr(step, "stacked_at", ()) else None)
        self.dtypes = {n: np.dtype(d) for n, (_, d) in lod_feeds.items()}
        self.dense_names = tuple(n for n in self.feed_names if n not in lod_feeds)
        # host checks left for the dense feeds once the stack has checked its tokens
        self.dense_checked = self.stack is not None and host_checks is not None and any(
            at not in self.stack.checked for at, _, _ in host_checks.sites)
        # the stacked form's (verdicts, capacity, per-feed (lengths, segment ids) on the
        # device) of the last steady call: the same verdicts again reuse them; replaced
        # whole (clones run unlocked from several threads)
        self.stacked_ints: tuple | None = None
        # the feed names of its key, when every feed is a stacked LoD feed: then the
        # StackPlan's checks (each feed's offsets, token shape and dtype equal to a verdict
        # found under this key) imply the key (Predictor.run skips building it)
        self.key_names = None


class Predictor:
    """``Predictor(program, feed_names, fetch_names, scope)``: runs ``program`` (an inference
    program, as ``load_inference_model`` returns it) with the parameters in ``scope``.
    ``run(feed)`` takes a dict of arrays (LoDTensors for LoD feeds) and returns the fetches
    in ``fetch_names`` order: numpy arrays, LoDTensors for LoD values."""

    def __init__(self, program: Program, feed_names, fetch_names, scope: Scope,
                 place=None, check_data: bool | None = None):
        if not isinstance(program, Program):
            raise PredictorError(f"Predictor expects a Program, got {type(program).__name__}")
        block = program.global_block()
        missing = [n for n in list(feed_names) + list(fetch_names) if not block.has_var(n)]
        if missing:
            raise PredictorError(f"the inference program has no variable(s) {missing}")
        self.program = program
        self.feed_names = list(feed_names)
        self.fetch_names = tuple(fetch_names)
        self.scope = scope
        self.executor = Executor(place, check_data=check_data)
        self._feed_vars = {n: block.var(n) for n in self.feed_names}
        self._fast: dict[tuple, _Fast] = {}
        self._last: _Fast | None = None  # the last one run stacked (see _Fast.key_names)
        # clones run from several threads: a step that rewrites state (batch norm's
        # statistics) donates the scope's buffers, and first runs go through the Executor,
        # so those runs take turns; a step of feeds and parameters only runs unlocked
        self._lock = threading.RLock()

    def feed_var(self, name: str):
        """The data Variable of feed ``name``."""
        try:
            return self._feed_vars[name]
        except KeyError:
            raise PredictorError(f"the model has no input '{name}'; its inputs are "
                                 f"{self.feed_names}") from None

    # -- runs ---------------------------------------------------------------------------
    @with_graphc_x64
    def run(self, feed: dict, lods: dict | None = None) -> list:
        """The fetched values for ``feed`` (see the class doc). ``lods``: offsets per level
        (``{name: [[0, 2, 5]]}``) of LoD inputs given in ``feed`` as plain token arrays
        (Paddle's zero-copy form), packed here without building LoDTensors."""
        if type(feed) is not dict:
            raise PredictorError(f"Predictor.run takes a dict of input arrays, got "
                                 f"{type(feed).__name__}")
        last = self._last
        if last is not None and lods and tuple(feed) == last.key_names:
            # the last steady signature's names again: its tokens' checks decide all the
            # key would (see _Fast.key_names), so the key need not be built
            if not last.updated:
                got = last.stack.tokens(feed, lods, last.verdicts, last.dtypes)
                if got is not None:
                    return self._run_stacked(last, feed, *got)
            else:
                with self._lock:
                    got = last.stack.tokens(feed, lods, last.verdicts, last.dtypes)
                    if got is not None:
                        return self._run_stacked(last, feed, *got)
        key = self._key(feed, lods)
        fast = self._fast.get(key) if key is not None else None
        if fast is not None:
            if not fast.updated:
                return self._run_fast(fast, feed, lods)
            with self._lock:
                return self._run_fast(fast, feed, lods)
        with self._lock:
            return self._run_first(key, feed, lods)

    def _run_first(self, key, feed: dict, lods: dict | None) -> list:
        for name in feed:
            if name not in self._feed_vars:
                raise FeedError(f"feed '{name}' is not an input of the inference model; its "
                                f"inputs are {self.feed_names}")
        # the caller's dict is left as it is (PaddlePredictor hands over its own)
        feed = self._with_lod_tensors(feed, lods) if lods else dict(feed)
        out = self.executor.run(self.program, feed=feed, fetch_list=list(self.fetch_names),
                                scope=self.scope, return_numpy=False)
        if key is not None:
            self._remember(key, feed)
        return [_host(v) for v in out]

    @staticmethod
    def _key(feed: dict, lods: dict | None):
        """The dense feeds' feed_key; for LoD feeds only their name, form and dtype (they
        are packed every run, with their checks)."""
        try:
            return tuple([
                (n, "offsets", v.dtype, v.shape[1:]) if lods and n in lods else
                (n, LoDTensor, v._value().dtype) if type(v) is LoDTensor else
                (n, type(v), v.dtype, v.shape) for n, v in feed.items()])
        except (AttributeError, GraphcError):
            return None

    def _with_lod_tensors(self, feed: dict, lods: dict) -> dict:
        feed = dict(feed)
        for name, offsets in lods.items():
            self.feed_var(name)
            if name not in feed:
                raise PredictorError(f"a LoD is set for input '{name}' but it has no data")
            t = LoDTensor(np.asarray(feed[name]))
            t.set_lod(offsets)  # LoDError naming what is wrong with the offsets
            feed[name] = t
        return feed

    def _remember(self, key: tuple, feed: dict) -> None:
        exe, names = self.executor, self.fetch_names
        prep = exe._prepare(self.program, None, names)
        dense = {n: v for n, v in feed.items() if type(v) is not LoDTensor}
        lod = {n: v for n, v in feed.items() if type(v) is LoDTensor}
        if lod:  # what the executor made of this feed: its checks, then the packed LoD
            arrays, sig = prep.feed.check_dict(self.program, feed, None)
            if any(arrays[n] is not v for n, v in dense.items()):
                return  # a dense feed was converted: it takes the full checks every run
            step = prep.steps.get((names, sig))
        else:
            plan = prep.feed.plans.get((names, key))
            step = plan[1] if plan is not None else None
        if step is None:
            return
        guard = prep.state_guards[step]
        if (step.created_names or step.uses_step_counter
                or guard.any_sharded or any(r is not None for r in guard.fetch_rows)
                or guard.blocks != 1 or step.num_iterations != 1):
            return  # not a function of feeds and parameters only: keep the executor's path
        readonly = tuple(self.scope.gather(step.readonly_names))
        feeds = prep.feed.feeds
        lod_feeds = {n: (feeds[n].type, prep.feed.feed_dtypes[n]) for n in lod
                     if n in feeds}
        if len(self._fast) >= _FAST_PER_PREDICTOR:
            self._fast.clear()
        # the predictor's own step (predictor_step.py): host segment ids for one-level LoD
        # feeds, the checks on the host when each is a fed id's
        host = HostIdChecks.of(step) if step.check_sites else None
        segments = frozenset(n for n, (t, _) in lod_feeds.items() if t.lod_level == 1)
        if host is None and not segments:
            self._fast[key] = _Fast(step, readonly, lod_feeds)
            return
        in_order = [n for n in step.feed_names if n in lod_feeds]
        stacked_at = (tuple(step.feed_names.index(n) for n in in_order)
                      if in_order and all(n in segments for n in in_order) else ())
        own = InferenceStep(step, check_data=step.check_data and host is None,
                            stacked_at=stacked_at)
        fast = self._fast[key] = _Fast(own, readonly, lod_feeds, step, host, segments)
        names = tuple(k[0] for k in key)
        if (fast.stack is not None and not fast.dense_names
                and sorted(names) == sorted(fast.stack.names)):
            fast.key_names = names

    def _run_fast(self, fast: _Fast, feed: dict, lods: dict | None) -> list:
        if fast.stack is not None and lods:
            got = fast.stack.tokens(feed, lods, fast.verdicts, fast.dtypes)
            if got is not None:  # the steady zero-copy case (see StackPlan)
                if fast.key_names is not None:
                    self._last = fast
                return self._run_stacked(fast, feed, *got)
        if fast.lod_feeds:
            lod = fast.lod_feeds
            # the executor packs a step's LoD feeds into one shared bucket: so does this path
            cap = (bucket(max(np.shape(feed[n])[0] for n in lod))
                   if _lod.SHARED_BUCKET and len(lod) > 1 else None)
            args = tuple([(_pack_offsets(n, feed[n], lods[n], *lod[n], fast.verdicts, cap)
                           if lods and n in lods
                           else pack_feeds({n: (feed[n], *lod[n])}, tokens_at_least=cap)[n])
                          if n in lod else feed[n] for n in fast.feed_names])
        else:
            args = tuple([feed[n] for n in fast.feed_names])
        if fast.base is not fast.step and _small(fast, args):
            return self._call(fast, fast.base, args)  # see DEVICE_SEGMENTS_UP_TO
        if fast.segments:
            args = _with_segments(fast, args)
        if fast.host_checks is not None:
            self._host_checks(fast, args)
        return self._call(fast, fast.step, args)

    def _host_checks(self, fast: _Fast, args: tuple, skip=frozenset()) -> None:
        refused = fast.host_checks.refused(args, skip)
        if refused is not None:  # before the step runs: nothing changes
            prep = self.executor._prepare(self.program, None, self.fetch_names)
            _raise_if_refused(fast.base, prep, refused)

    def _run_stacked(self, fast: _Fast, feed: dict, tokens: np.ndarray, seens: tuple) -> list:
        """The steady case: ``tokens`` (StackPlan.tokens, its ids checked) and the lengths
        and segment ids of the last call with the same verdicts, kept on the device."""
        if fast.dense_checked:
            self._host_checks(fast, tuple([feed.get(n) for n in fast.feed_names]),
                              fast.stack.checked)
        exe, names, step = self.executor, fast.updated, fast.step
        updated = self.scope.gather(names) if names else ()
        dense = tuple([feed[n] for n in fast.dense_names]) if fast.dense_names else ()
        if exe._on_default_device:
            memo = _stacked_ints(fast, tokens.shape[1], seens)
            new, _, fetched, checks = step.call_stacked(updated, fast.readonly, dense,
                                                        tokens, memo)
        else:
            with jax.default_device(exe._device):
                memo = _stacked_ints(fast, tokens.shape[1], seens)
                new, _, fetched, checks = step.call_stacked(updated, fast.readonly, dense,
                                                            tokens, memo)
        return self._finish(step, names, new, fetched, checks)

    def _call(self, fast: _Fast, step, args: tuple) -> list:
        """Run ``step`` on ``args`` with the remembered state; the fetches on the host."""
        exe, names = self.executor, fast.updated
        updated = self.scope.gather(names) if names else ()
        if exe._on_default_device:
            new, _, fetched, checks = step(updated, fast.readonly, args, None)
        else:
            with jax.default_device(exe._device):
                new, _, fetched, checks = step(updated, fast.readonly, args, None)
        return self._finish(step, names, new, fetched, checks)

    def _finish(self, step, names: tuple, new, fetched, checks) -> list:
        """Commit the step's state, raise its refused checks, bring its fetches home."""
        if names:
            self.scope.commit(names, new)
        if step.check_sites and any(row[COUNT] for row in np.asarray(checks).tolist()):
            prep = self.executor._prepare(self.program, None, self.fetch_names)
            _raise_if_refused(step, prep, np.asarray(checks))
        return [np.asarray(a) if type(a) is not LoDArray else
                _host(unpack_fetch(a, 1, 1, False)) for a in fetched]

    def clone(self) -> Predictor:
        """A predictor sharing this one's program, parameters and compiled steps."""
        twin = object.__new__(Predictor)
        twin.__dict__.update(self.__dict__)
        return twin


def _stacked_ints(fast: _Fast, cap: int, seens: tuple) -> tuple:
    """The stacked form's per-feed (lengths, segment ids) on the device for these verdicts
    at ``cap``: the last call's when its verdicts are the same objects, else made now."""
    memo = fast.stacked_ints
    if memo is None or memo[1] != cap or not all(map(is_, seens, memo[0])):
        memo = seens, cap, tuple([(jnp.asarray(s[4]), jnp.asarray(host_segments(s[4], cap)))
                                  for s in seens])
        fast.stacked_ints = memo
    return memo[2]


def _small(fast: _Fast, args: tuple) -> bool:
    """Whether the LoD feeds' buffer is small enough for the executor's own step."""
    for n, a in zip(fast.feed_names, args):
        if n in fast.lod_feeds and isinstance(a, LoDArray):
            return a.data.shape[0] <= DEVICE_SEGMENTS_UP_TO
    return False


def _with_segments(fast: _Fast, args: tuple) -> tuple:
    """``args`` with each one-level LoD feed as (its LoDArray, its segment ids), the ids
    kept while the feed's lengths array is the same one (a repeated verdict's)."""
    out = list(args)
    for i, name in enumerate(fast.feed_names):
        memo = fast.segments.get(name)
        if memo is None or not isinstance(out[i], LoDArray):
            continue
        lod = out[i]
        lengths, cap = lod.lengths[0], lod.data.shape[0]
        if memo[0] is not lengths or memo[1] != cap:
            memo = lengths, cap, host_segments(np.asarray(lengths), cap)
            fast.segments[name] = memo
        out[i] = (lod, memo[2])
    return tuple(out)


def _host(value):
    """A fetched value on the host: a LoDTensor as it is, anything else as a numpy array
    (a LoDTensor without LoD, as ``return_numpy=False`` may give, as its array)."""
    if isinstance(value, LoDTensor):
        return value if value.recursive_sequence_lengths() else np.asarray(value)
    return np.asarray(value)


def _pack_offsets(name: str, data, offsets, want, dtype, verdicts: dict,
                  shared_cap: int | None = None) -> LoDArray:
    """A one-level LoD input given as tokens and offsets, packed as ``pack_feed`` packs it
    (same bucket, same lengths) with the checks done in a few array operations, and none
    when the offsets (a list), token shape and dtype equal the last ones found valid for
    this input (``verdicts``: the checks depend on nothing else). Anything else, or anything
    wrong, takes ``pack_feed``'s full path and its errors."""
    seen = verdicts.get(name)
    if (seen is not None and type(data) is np.ndarray and data.shape == seen[1]
            and data.dtype == dtype and len(offsets) == 1 and type(offsets[0]) is list
            and offsets[0] == seen[0]):
        _, _, tokens_shape, cap, lengths = seen
        cap = shared_cap or cap
        return LoDArray(_padded(data.reshape(tokens_shape), cap, dtype), (lengths,))
    if (len(offsets) == 1 and want.lod_level == 1 and type(data) is np.ndarray
            and data.dtype == dtype and data.ndim):
        level, rows = offsets[0], data.shape[0]
        off = np.asarray(level)
        if (off.ndim == 1 and off.size >= 2 and off.dtype.kind in "iu" and level[0] == 0
                and level[-1] == rows):
            lengths = np.subtract(off[1:], off[:-1], dtype=np.int32)
            if off.size == 2 or lengths.min() >= 0:
                tokens, nd = data, len(want.shape)
                if data.ndim > nd >= 1 and all(d == 1 for d in data.shape[nd:]):
                    tokens = data.reshape(data.shape[:nd])  # [N, 1] ids for [-1] tokens
                if dims_compatible(tokens.shape, want.shape):
                    cap = shared_cap or bucket(rows)
                    if type(level) is list:
                        verdicts[name] = (list(level), data.shape, tokens.shape, cap, lengths)
                    return LoDArray(_padded(tokens, cap, dtype), (lengths,))
    t = LoDTensor(np.asarray(data))
    t.set_lod(offsets)
    return pack_feeds({name: (t, want, dtype)}, tokens_at_least=shared_cap)[name]


def _padded(tokens: np.ndarray, cap: int, dtype) -> np.ndarray:
    """``tokens`` in a buffer of ``cap`` rows, zero past the tokens (pack_feed's layout)."""
    rows = tokens.shape[0]
    if cap == rows:
        return tokens
    packed = np.zeros((cap, *tokens.shape[1:]), dtype)
    packed[:rows] = tokens
    return packed
