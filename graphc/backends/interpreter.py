"""The reference interpreter: runs a graph op by op, eagerly, with each op's lowering rule.

It is the oracle every pass is tested against: no whole-graph compilation, no fusion.
With ``num_threads > 1`` (ExecutionStrategy.num_threads) a thread pool runs every op whose
operands are ready concurrently; results equal the sequential run's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

import jax
import jax.numpy as jnp
import numpy as np

from ..ir.errors import GraphcError
from ..ir.graph import Graph, Value
from .compiled_rules import RuleCache, current_rule_cache, rule_cache_in_effect
from .evaluate import evaluate, evaluate_op, evaluate_replicas
from .lod import LoDArray, concat_blocks, split_sequences
from .lowering import Replicas, replica_groups
from .precision import with_graphc_x64
from .selected_rows import SelectedRows, concat_rows, replica_block, to_host

# cache: the interpreter's compiled rules (backends/compiled_rules.py), shared by its runs in
# this process so that an op type with given attrs and input shapes compiles once, not once
# per primitive per run; bounded (least recently used dropped), and dropping it costs only
# recompiles. ``run_graph(..., rules=None)`` runs every rule eagerly instead.
RULES = RuleCache(maxsize=4096)


class InterpreterError(GraphcError):
    """Missing inputs or unknown fetch targets for an interpreter run."""


def resolve_fetch(graph: Graph, target) -> Value:
    """A fetch target (Value, SSA name, or variable name = its last version) as a Value."""
    if isinstance(target, Value):
        return target
    name = getattr(target, "name", target)
    if name in graph.values and "#" in name:
        return graph.values[name]
    try:
        return graph.latest(name)
    except GraphcError:
        raise InterpreterError(f"cannot fetch '{name}': no op of the program computes it and "
                               "it is not an input") from None


@with_graphc_x64
def bind_inputs(graph: Graph, state: dict, feeds: dict) -> dict[Value, object]:
    env = {}
    for v in graph.inputs:
        source = feeds if v.var.kind == "feed" else state
        if v.var.name not in source:
            if v.var.kind == "feed" and not graph.nx.succ[v]:
                continue  # declared but unused feed
            if "initial_value" in v.var.extra:  # state a pass created (amp's loss scale)
                env[v] = jnp.full(v.type.shape, v.var.extra["initial_value"], v.type.dtype)
                continue
            members = v.var.extra.get("stack_of")
            if members and all(m in source for m in members):  # stacked state, by member
                env[v] = jnp.stack([jnp.asarray(source[m]) for m in members])
                continue
            what = "feed" if v.var.kind == "feed" else "state variable"
            raise InterpreterError(f"missing {what} '{v.var.name}' ({v.type})")
        value = source[v.var.name]
        # a LoD feed arrives packed (runtime/lod.py): its arrays go in as they are
        env[v] = jax.tree.map(jnp.asarray, value) if isinstance(value, LoDArray) else \
            jnp.asarray(value)
    return env


@with_graphc_x64
def evaluate_concurrently(graph: Graph, env: dict[Value, object], step=0,
                          num_threads: int = 2) -> dict[Value, object]:
    """``evaluate`` with a pool of ``num_threads`` threads: an op is submitted as soon as
    every value it reads, data or control (``_deps``), has been computed, so ops on
    independent branches overlap. The first failing op's error is raised, after the ops
    already running finish; nothing else starts once one has failed."""
    succ, pred = graph._succ, graph._pred
    # operand edges still to be produced, as the stable topological order counts them
    waiting = {op: sum(len(keys) for v, keys in pred[op].items() if pred[v])
               for op in graph.ops_by_id.values()}
    running: dict = {}
    pool = ThreadPoolExecutor(max_workers=num_threads, thread_name_prefix="graphc-op")
    cache = current_rule_cache()  # context variables do not reach the pool's threads

    @with_graphc_x64  # x64 mode is per thread: each worker enters it
    def run_op(*args):
        with rule_cache_in_effect(cache):
            evaluate_op(*args)

    try:
        def submit(op) -> None:
            running[pool.submit(run_op, graph, op, env, step)] = op

        for op in graph.ops():  # program order among the ops ready at the start
            if waiting[op] == 0:
                submit(op)
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            finished = sorted((running.pop(f) for f in done), key=lambda o: (o.seq, o.id))
            for f in done:
                f.result()  # re-raises the op's error
            for op in finished:
                for value in succ[op]:
                    for user, keys in succ[value].items():
                        waiting[user] -= len(keys)
                        if waiting[user] == 0:
                            submit(user)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    stuck = [op for op, n in waiting.items() if n > 0]
    if stuck:  # only a cyclic graph leaves ops waiting; graph.ops() raised for it already
        raise InterpreterError(f"{len(stuck)} ops never became ready")
    return env


def split_batch(name: str, value, parts: int) -> list:
    """``value`` cut into ``parts`` equal pieces along its first (batch) dimension; a LoD
    value into ``parts`` groups of whole sequences."""
    if isinstance(value, LoDArray):
        try:
            return split_sequences(value, parts)
        except ValueError as exc:
            raise InterpreterError(f"feed '{name}': {exc} (one per replica)") from None
    arr = np.asarray(value)
    if arr.ndim == 0 or arr.shape[0] % parts:
        size = "a scalar" if arr.ndim == 0 else f"batch {arr.shape[0]}"
        raise InterpreterError(f"feed '{name}' has {size}, which does not split into "
                               f"{parts} equal parts (one per replica)")
    return np.split(arr, parts)


@with_graphc_x64
def run_replicas(graph: Graph, state: dict | None = None, feeds: dict | None = None,
                 fetch: Iterable = (), step: int = 0, num_replicas: int = 2,
                 inter_nranks: int = 0, check_replicated: bool = True,
                 rules: RuleCache | None = RULES):
    """Run once on ``num_replicas`` simulated data-parallel replicas, in lock step.

    Each feed is split along its batch dimension; every replica starts from the same
    ``state``, except variables the graph marks ``shard`` (Reduce mode's optimizer state):
    given whole (or as ``[nranks, c]`` rows), replica r gets its ``[1, c]`` shard, and the
    new state holds them whole again. Collectives use their cross-replica reference rules.
    Returns (new state of replica 0, sharded variables reassembled, [fetches concatenated
    over replicas along dim 0 (a row-sparse one stands for that concatenation)], as
    ``with_data_parallel`` merges them).
    ``check_replicated``: raise if a parameter ends up different on two replicas (a gradient
    that was not all-reduced, say). ``rules``: as for ``run_graph``.
    """
    fetch_values = [resolve_fetch(graph, f) for f in fetch]
    replicas = Replicas(num_replicas, replica_groups(num_replicas, inter_nranks))
    feeds = feeds or {}
    pieces = {name: split_batch(name, value, num_replicas) for name, value in feeds.items()}
    state = dict(state or {})
    sharded = {v.var.name: v.var.shard for v in graph.inputs if v.var.shard is not None
               and v.var.name in state}
    rows = {name: _shard_rows(name, state[name], shard, num_replicas)
            for name, shard in sharded.items()}
    envs = [bind_inputs(graph, {**state, **{n: r_[r:r + 1] for n, r_ in rows.items()}},
                        {n: p[r] for n, p in pieces.items()})
            for r in range(num_replicas)]
    with rule_cache_in_effect(rules):
        evaluate_replicas(graph, envs, replicas, step)
    if check_replicated:
        for v in graph.outputs:
            if v.var.kind != "param" or not v.var.trainable:
                continue  # batch norm's running statistics stay per replica, as in Paddle
            first = np.asarray(envs[0][v])
            for r, env in enumerate(envs[1:], 1):
                if not np.array_equal(first, np.asarray(env[v])):
                    raise InterpreterError(f"parameter '{v.var.name}' differs between replica "
                                           f"0 and replica {r} after the step")
    new_state = {v.var.name: np.asarray(envs[0][v]) if v.var.shard is None else
                 _unshard(np.concatenate([np.asarray(env[v]) for env in envs]), v.var.shard[1])
                 for v in graph.outputs}
    fetched = [_merge_replicas([env[v] for env in envs]) for v in fetch_values]
    return new_state, fetched


def _merge_replicas(values: list):
    """One fetch over replicas, concatenated along dim 0; a row-sparse one stands for the
    concatenation of the dense tensors (height nranks * H, replica r's rows offset r * H)."""
    if isinstance(values[0], LoDArray):  # device blocks, as a data-parallel fetch has
        return concat_blocks(values)
    if isinstance(values[0], SelectedRows):
        return concat_rows([to_host(replica_block(v, r, len(values)))
                            for r, v in enumerate(values)])
    return np.concatenate([np.atleast_1d(np.asarray(v)) for v in values])


def _shard_rows(name: str, value, shard: tuple, nranks: int) -> np.ndarray:
    """A sharded variable's value (whole, or already ``[nranks, c]`` rows) as its rows."""
    arr = np.asarray(value)
    shard_nranks, shape = shard
    c = -(-math.prod(shape) // shard_nranks)
    if shard_nranks != nranks:
        raise InterpreterError(f"state variable '{name}' is sharded over {shard_nranks} "
                               f"replicas but the run has {nranks}")
    if arr.shape == (nranks, c):
        return arr
    if arr.shape != tuple(shape):
        raise InterpreterError(f"state variable '{name}' has shape {list(arr.shape)}; expected "
                               f"the whole {list(shape)} or its rows {[nranks, c]}")
    flat = arr.reshape(-1)
    return np.pad(flat, (0, nranks * c - flat.size)).reshape(nranks, c)


def _unshard(rows: np.ndarray, shape) -> np.ndarray:
    return rows.reshape(-1)[:math.prod(shape)].reshape(shape)


@with_graphc_x64
def run_graph(graph: Graph, state: dict | None = None, feeds: dict | None = None,
              fetch: Iterable = (), step: int = 0, num_threads: int = 1,
              rules: RuleCache | None = RULES):
    """Run once. Returns (new state {var: array} for every graph output, [fetched arrays]).

    ``num_threads > 1`` runs ready ops concurrently in a thread pool of that size. The
    interpreter keeps nothing between runs: every run starts from ``state`` and ``feeds``
    and its temporaries are dropped when it returns (so any
    ``num_iteration_per_drop_scope`` is honoured).

    ``rules``: where each op's rule is compiled and kept (one XLA executable per op type,
    attrs and input shapes; ops still run one by one); None runs every rule eagerly,
    primitive by primitive. Both give the same values.
    """
    if not isinstance(num_threads, int) or num_threads < 1:
        raise InterpreterError(f"num_threads must be an int >= 1, got {num_threads!r}")
    fetch_values = [resolve_fetch(graph, f) for f in fetch]
    env = bind_inputs(graph, state or {}, feeds or {})
    with rule_cache_in_effect(rules):
        if num_threads == 1:
            evaluate(graph, env, step)
        else:
            evaluate_concurrently(graph, env, step, num_threads)
    new_state = {}
    for v in graph.outputs:  # stacked state (roll-repeated-layers) is returned by member
        arr = np.asarray(env[v])
        members = v.var.extra.get("stack_of")
        new_state.update(zip(members, arr) if members else ((v.var.name, arr),))
    return new_state, [env[v].numpy() if isinstance(env[v], LoDArray) else to_host(env[v])
                       for v in fetch_values]
