"""Emit one jitted XLA program per training/inference step from an SSA graph.

State that the step updates is donated (updated in place); unchanged state is only read.
With ``num_iterations = K`` one call runs K steps (``lax.scan`` over feeds stacked on a new
leading axis, carrying the updated state), so K steps cost one dispatch.
Data checks (``check_data``): what rules report invalid (labels outside [0, classes), ids
outside a table; see backends.data_checks) comes back as a small array; a step that found
any skips its update (a cond) and returns its old state, and the runtime raises DataError
before committing.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...ir.errors import GraphcError
from ...ir.grad_defs import forward_type
from ...ir.graph import Graph, Op
from ...ir.opdef import RANDOM, get_op_def
from ..data_checks import HostChecks, InvalidReport, collecting, ok, over_iterations, summarise
from ..evaluate import evaluate, evaluate_op, step_keys
from ..interpreter import resolve_fetch
from ..lod import LoDArray
from ..lowering import forward_stash, services_in_effect
from ..precision import graphc_products, with_graphc_x64
from ..selected_rows import SelectedRows


class CompiledStep:
    """A graph as a jitted step. Call with (updated, readonly, feeds, step) tuples.

    ``updated_inputs``: state variables the step writes (their buffers are donated);
    ``readonly_inputs``: state it only reads; ``feed_inputs``: fed values it uses;
    ``updated_outputs[i]`` is the new value of ``updated_inputs[i]``'s variable.

    ``num_iterations = K > 1``: each feed carries K steps' arrays on a new leading axis, the
    step counter advances by one per iteration (dropout masks equal K single calls'), state
    is carried from step to step, fetches come back stacked ``[K, ...]`` and created state
    is the last iteration's.

    A call returns ``(new updated, created, fetched, checks)``: ``checks`` is the int64
    ``[len(check_sites), 4]`` summary of the data checks (backends.data_checks.summarise),
    ``check_sites`` the reports they stand for (filled when the step is traced, on its
    first call). When one found a bad value the step's new updated state equals its old.
    ``check_data=False`` builds the step without them (``checks`` is then ``[0, 4]``; the
    jitted call of a one-device, one-iteration step returns None instead: see ``_once``).
    ``services``: the runtime's HostServices, which the rules see (``c.services``) whenever
    the step is traced (a parameter server's channel, a collective deadline).
    ``host_feeds``: feeds given as numpy arrays, checked on the host: a range check of one
    of them as fed (``report_invalid(within=...)``) leaves the program and is listed in
    ``host_checks`` as (feed name, its check site) once the step is traced (``trace``);
    ``host_checker`` (data_checks.HostChecks, None when none left) makes them, which a call
    does before it dispatches (the runtime's steady path calls ``_jitted`` after making
    them itself).
    """

    def __init__(self, graph: Graph, fetch: Sequence, donate: bool = True,
                 num_iterations: int = 1, check_data: bool = True, services=None,
                 host_feeds: frozenset = frozenset()):
        self.graph = graph
        self.services = services
        self.fetch_values = [resolve_fetch(graph, f) for f in fetch]
        final = {v.var.name: v for v in graph.outputs}
        state_inputs = [v for v in graph.inputs if v.var.kind != "feed"]
        # A persistable written by the step: its final version differs from its input.
        self.updated_inputs = [v for v in state_inputs if final.get(v.var.name, v) is not v]
        fetched = set(self.fetch_values)

        def used(v) -> bool:  # read by an op, or fetched as it is
            return bool(graph.nx.succ[v]) or v in fetched

        self.readonly_inputs = [v for v in state_inputs if final.get(v.var.name, v) is v
                                and used(v)]
        self.feed_inputs = [v for v in graph.inputs if v.var.kind == "feed" and used(v)]
        self.updated_outputs = [final[v.var.name] for v in self.updated_inputs]
        # Persistables first created by the step (startup programs) are outputs too.
        inputs_by_var = {v.var.name for v in state_inputs}
        self.created_outputs = [v for v in graph.outputs if v.var.name not in inputs_by_var]
        # Variable names in argument order, so a runtime need not walk Values on every run.
        self.updated_names = [v.var.name for v in self.updated_inputs]
        self.readonly_names = [v.var.name for v in self.readonly_inputs]
        self.state_names = self.updated_names + self.readonly_names
        self.feed_names = [v.var.name for v in self.feed_inputs]
        self.created_names = [v.var.name for v in self.created_outputs]
        self._ops = graph.ops()
        self._split_updates()
        self.uses_step_counter = any(_is_random(op) for op in self._ops)
        self.donate = donate
        self.check_data = check_data
        self.check_sites: list[InvalidReport] = []
        # one step a call (K per call and data-parallel steps keep every check in XLA)
        self.host_feeds = host_feeds if num_iterations == 1 else frozenset()
        self.host_checks: list[tuple[str, InvalidReport]] = []
        self.host_checker: HostChecks | None = None
        self._host_traced = False  # whether host_checks are known (the step was traced)
        self.feed_shapes: dict[str, tuple] = {}  # set by the runtime for inspection
        # how many times JAX traced this step (its first call, each retrace, ``lower``):
        # what a test of "no retrace" reads. ``_jitted._cache_size()`` is no trace count: it
        # sizes jit's C++ dispatch cache, a bounded LRU that every jit of the process shares,
        # so after enough other jits (earlier tests of a worker) it reads 0 for a step that
        # was traced and called
        self.traces = 0
        if not isinstance(num_iterations, int) or num_iterations < 1:
            raise GraphcError(f"num_iterations must be an int >= 1, got {num_iterations!r}")
        self.num_iterations = num_iterations
        if num_iterations > 1:
            for v, out in zip(self.updated_inputs, self.updated_outputs):
                if v.type != out.type:
                    raise GraphcError(
                        f"cannot run {num_iterations} iterations per call: state "
                        f"'{v.var.name}' is read as {v.type} but written as {out.type}, so "
                        "the next iteration could not read it")
        self._jitted = self._jit(self._traced_with_services(
            (self._once if self._drops_empty_checks else self._step)
            if num_iterations == 1 else self._steps))
        self._traceable = self._jitted  # jax's own jit (tiering may wrap ``_jitted``)
        self._rows_jit = None  # call_lod_rows's, made on its first use

    # what collective ops see: None on one device (data_parallel.py maps steps over several)
    replicas = None
    # whether the jitted call returns None for an empty checks summary (see ``_once``); a
    # data-parallel step's out_specs keep the summary's place
    _drops_empty_checks = True

    def _once(self, updated, readonly, feeds, step):
        """``_step`` for the jitted call: no checks left in the program (none, or all made
        on the host) means no ``[0, 4]`` summary either. Why: an output is a buffer XLA
        allocates and a constant it copies each call, and an Array JAX makes for it, in a
        steady step that is otherwise the hand-written one (issue 28's tiny MLP)."""
        new, created, fetched, checks = self._step(updated, readonly, feeds, step)
        return new, created, fetched, None if checks is _NO_CHECKS else checks

    def _jit(self, body):
        return jax.jit(body, donate_argnums=(0,) if self.donate else ())

    def _traced_with_services(self, body):
        """``body`` with this step's services in effect whenever JAX traces it (its first
        call, a retrace, ``lowered_text``), so its rules read them and nothing else."""
        services = self.services

        def traced(*args):
            self.traces += 1
            # one step's random ops take their keys from one hash (K steps per call: each
            # iteration's counter is made inside the scan, so each op folds its own)
            step = args[3] if self.num_iterations == 1 else None
            with services_in_effect(services), forward_stash(), graphc_products(), \
                    step_keys(self.graph, self._ops, step):
                return body(*args)

        return traced

    def _split_updates(self) -> None:
        """Split the ops for data checks: ``_update_ops`` are the ops whose outputs are all
        final versions of updated state (the optimizer's, amp's loss-scale updates) and every
        op downstream of one; the rest (``_pre_ops``, which never read an update op's
        output) run first. ``_update_reads``: what the update ops read from the rest;
        ``_update_outs``: what they produce that the step returns."""
        graph, final = self.graph, set(self.updated_outputs)
        updating: set = set()
        for op in self._ops:
            outs = [v for vals in graph.op_outputs(op).values() for v in vals]
            ins = [v for vals in graph.op_inputs(op).values() for v in vals]
            if (outs and all(v in final for v in outs)) or any(
                    graph.producer(v) in updating for v in ins):
                updating.add(op)
        self._pre_ops = [op for op in self._ops if op not in updating]
        self._update_ops = [op for op in self._ops if op in updating]
        made = {v for op in self._update_ops for vals in graph.op_outputs(op).values()
                for v in vals}
        reads = {v: None for op in self._update_ops for vals in graph.op_inputs(op).values()
                 for v in vals if v not in made}
        old_of = dict(zip(self.updated_outputs, self.updated_inputs))
        outs = [v for v in (*self.updated_outputs, *self.created_outputs,
                            *self.fetch_values) if v in made]
        self._update_outs = list(dict.fromkeys(outs))
        for v in self._update_outs:  # a refused step returns the state it was given
            if v in old_of:
                reads.setdefault(old_of[v])
        self._update_reads = list(reads)
        self._old_of = old_of

    def _step(self, updated, readonly, feeds, step):
        """``step`` is None when no op is random (see ``_is_random``)."""
        env = dict(zip(self.updated_inputs, updated))
        env.update(zip(self.readonly_inputs, readonly))
        env.update(zip(self.feed_inputs, feeds))
        if not self.check_data:
            evaluate(self.graph, env, step, self.replicas, ops=self._ops)
            return (*self._outputs(env), _NO_CHECKS)
        with collecting() as reports:
            for op in self._pre_ops:
                seen = len(reports)
                evaluate_op(self.graph, op, env, step, self.replicas)
                if forward_type(op.type) is not None:
                    # a grad op re-reads what its forward op checked (its own checks stay)
                    reports[seen:] = [r for r in reports[seen:] if r.own]
                for r in reports[seen:]:
                    r.op = op
        if self.host_feeds:
            reports[:] = self._hoist(reports, env)
        self.check_sites = [InvalidReport(r.op_type, r.where, r.slot, r.expected,
                                          tuple(r.bad.shape), None, r.op) for r in reports]
        if not reports:
            evaluate(self.graph, env, step, self.replicas, ops=self._update_ops)
            return (*self._outputs(env), _NO_CHECKS)
        # The checks decide whether the update ops run at all: inside a cond they still
        # update the donated buffers in place, and everything that reads the old state
        # (the backward pass) has run before it, so XLA need not copy it.
        checks = summarise(reports, self.replicas)
        good = ok(checks)

        def run(values):
            env_u = dict(zip(self._update_reads, values))
            evaluate(self.graph, env_u, step, self.replicas, ops=self._update_ops)
            return tuple(env_u[v] for v in self._update_outs)

        operands = tuple(env[v] for v in self._update_reads)
        shapes = jax.eval_shape(run, operands)

        def refuse(values):
            env_u = dict(zip(self._update_reads, values))
            return tuple(_same_or_zeros(env_u.get(self._old_of.get(v)), shape)
                         for v, shape in zip(self._update_outs, shapes))

        env.update(zip(self._update_outs, lax.cond(good, run, refuse, operands)))
        # state the other ops write (batch norm's running statistics) is selected
        made = set(self._update_outs)
        env.update({out: jnp.where(good, env[out], env[old])
                    for out, old in self._old_of.items()
                    if out not in made and _same_type(env[out], env[old])})
        return (*self._outputs(env), checks)

    def _hoist(self, reports: list, env: dict) -> list:
        """The reports left for the program: when every one is a range check of a
        host-checked feed's array as fed (the very array the step was given), they are
        listed in ``host_checks`` instead and none is left. All or none: a step keeps a
        summary and its conditional for one check anyway, and a caller that takes the
        step's remaining checks on itself (the predictor's) then sees them all."""
        feeds, hoisted = set(self.feed_inputs), []
        for r in reports:
            value = r.op.input(r.slot) if r.within is not None and r.op is not None else None
            if value is None or value not in feeds or value.var.name not in self.host_feeds \
                    or env.get(value) is not r.values or np.shape(r.bad) != np.shape(r.values):
                hoisted = None
                break
            hoisted.append((value.var.name, InvalidReport(
                r.op_type, r.where, r.slot, r.expected, tuple(np.shape(r.bad)), None, r.op,
                within=r.within)))
        self.host_checks = hoisted or []
        self.host_checker = HostChecks(hoisted) if hoisted else None
        self._host_traced = True
        return reports if hoisted is None else []

    @with_graphc_x64
    def trace(self, updated, readonly, feeds, step) -> None:
        """Trace the step for these arguments without running it (a later call reuses the
        trace): ``check_sites`` and ``host_checks`` are then known."""
        self._traceable.trace(*self._args(updated, readonly, feeds, step))

    def _outputs(self, env) -> tuple:
        return (tuple(env[v] for v in self.updated_outputs),
                tuple(env[v] for v in self.created_outputs),
                tuple(env[v] for v in self.fetch_values))

    def _steps(self, updated, readonly, feeds, step):
        """K steps in one program: scan over the stacked feeds, carrying the updated state."""
        def body(carry, xs):
            feeds_i, i = xs
            new, created, fetched, checks = self._step(carry, readonly, feeds_i,
                                                       None if step is None else step + i)
            # the carry keeps its exact type (a rule may return a weakly typed array)
            new = tuple(lax.convert_element_type(n, c.dtype) for n, c in zip(new, carry))
            return new, (created, fetched, checks)

        iterations = jnp.arange(self.num_iterations)
        new, (created, fetched, checks) = lax.scan(body, tuple(updated),
                                                   (tuple(feeds), iterations))
        checks = over_iterations(checks)
        if checks.shape[0]:  # one bad iteration refuses the whole call
            new = _keep_old_unless(ok(checks), new, updated)
        return new, tuple(c[-1] for c in created), fetched, checks

    def _args(self, updated, readonly, feeds, step) -> tuple:
        # Only random ops read the run counter; for the others passing None spares JAX
        # converting a Python int on every call (a few microseconds of each run).
        return (tuple(updated), tuple(readonly), tuple(feeds),
                step if self.uses_step_counter else None)

    @with_graphc_x64  # traced, compiled and called with 64-bit types (int64 labels)
    def __call__(self, updated, readonly, feeds, step):
        if self.host_feeds:  # the checks taken out of the program, before it runs
            if not self._host_traced:
                self.trace(updated, readonly, feeds, step)
            if self.host_checker is not None:
                self.host_checker(dict(zip(self.feed_names, feeds)))
        return self._jitted(*self._args(updated, readonly, feeds, step))

    def call_lod_rows(self, updated, readonly, dense: tuple, tokens, lengths, layout: tuple,
                     step):
        """The step (one iteration) with its one-level LoD feeds given as rows of one token
        buffer ``tokens`` ``[k, bucket, ...]`` and one lengths array ``[k, sequences]``:
        ``layout`` ((feed position, row), ...) in position order, the other feeds in
        ``dense`` in their order. Equals the call with each feed as its own LoDArray (the
        rows are sliced inside the program). Why: every host array a call hands XLA costs a
        transfer and a pytree node; a CTR step with 26 slots took 52 of them. Called
        inside graphc_x64 (the runtime's run); compiles once per layout, on first use."""
        jitted = self._rows_jit
        if jitted is None:
            jitted = self._rows_jit = jax.jit(self._traced_with_services(self._unstack),
                                                 donate_argnums=(0,), static_argnums=(6,))
        return jitted(tuple(updated), tuple(readonly), dense,
                      step if self.uses_step_counter else None, tokens, lengths, layout)

    def _unstack(self, updated, readonly, dense, step, tokens, lengths, layout):
        feeds = list(dense)
        for position, row in layout:  # (ascending positions: each lands where it belongs)
            feeds.insert(position, LoDArray(tokens[row], (lengths[row],)))
        return self._step(updated, readonly, tuple(feeds), step)

    def global_type_shape(self, value) -> tuple:
        """The shape the runtime holds for ``value`` (one device: its type's shape)."""
        return value.type.shape

    # -- inspection -------------------------------------------------------------------
    def abstract_args(self, feed_shapes: dict[str, tuple] | None = None) -> tuple:
        """Shape/dtype stand-ins for every argument; feeds with -1 dims need a shape."""
        feed_shapes = feed_shapes if feed_shapes is not None else self.feed_shapes

        def spec(v, shape=None):
            if shape is None:
                shape = v.type.shape
                if v.var.kind == "feed" and self.num_iterations > 1:
                    shape = (self.num_iterations, *shape)
            shape = tuple(shape)
            if shape and shape[0] == "lod":  # ("lod", data shape, lengths shapes...)
                return LoDArray(jax.ShapeDtypeStruct(shape[1], v.type.dtype),
                                tuple(jax.ShapeDtypeStruct(s, "int32") for s in shape[2:]))
            if any(d < 0 for d in shape):
                raise ValueError(f"give a concrete shape for feed '{v.var.name}' ({v.type})")
            return jax.ShapeDtypeStruct(shape, v.type.dtype)

        return self._args([spec(v) for v in self.updated_inputs],
                          [spec(v) for v in self.readonly_inputs],
                          [spec(v, feed_shapes.get(v.var.name)) for v in self.feed_inputs], 0)

    @with_graphc_x64
    def lower(self, feed_shapes: dict[str, tuple] | None = None):
        """jax's Lowered for these feed shapes (default: those it was compiled for)."""
        return self._jitted.lower(*self.abstract_args(feed_shapes))

    def lowered_text(self, feed_shapes=None) -> str:
        """The step as StableHLO text, before XLA's optimisations."""
        return self.lower(feed_shapes).as_text()

    @with_graphc_x64
    def compiled_text(self, feed_shapes=None) -> str:
        """The step as optimised HLO text, after XLA's fusions."""
        return self.lower(feed_shapes).compile().as_text()

    @with_graphc_x64
    def cost_analysis(self, feed_shapes=None) -> dict:
        """XLA's estimate: flops, bytes accessed, ... of one step."""
        cost = self.lower(feed_shapes).compile().cost_analysis()
        return dict(cost[0] if isinstance(cost, list) else cost or {})

    @with_graphc_x64
    def memory_analysis(self, feed_shapes=None):
        """XLA's buffer sizes: arguments, outputs, temporaries, aliased (donated) bytes."""
        return self.lower(feed_shapes).compile().memory_analysis()

    @property
    def memory_plan(self):
        """The enable-inplace / memory-optimize plan of this step's graph, if one is current."""
        plan = getattr(self.graph, "memory_plan", None)
        return plan if plan is not None and plan.is_current(self.graph) else None

    def batch_size(self, feed_shapes: dict[str, tuple] | None = None) -> int:
        """The size the feeds give their -1 dimensions (the largest, if they differ)."""
        feed_shapes = feed_shapes if feed_shapes is not None else self.feed_shapes
        lead = 1 if self.num_iterations > 1 else 0
        sizes = {shape[lead + i] for v in self.feed_inputs
                 if (shape := feed_shapes.get(v.var.name)) is not None
                 and not v.type.lod_level  # a LoD feed's -1 counts tokens (a bucket)
                 for i, d in enumerate(v.type.shape) if d < 0}
        return max(sizes, default=1)

    def memory_report(self, feed_shapes=None) -> dict[str, int]:
        """The memory plan's predicted bytes beside XLA's ``memory_analysis`` for one step.

        ``predicted_*`` come from the plan at this step's batch size (``predicted_total`` =
        arguments + outputs - donated + temporaries' peak); ``xla_*`` from the compiled
        executable, ``xla_total`` = temp + argument + output - alias. Needs a graph built
        with BuildStrategy(enable_inplace=True) (or memory_optimize) and one iteration.
        """
        plan = self.memory_plan
        if plan is None:
            raise GraphcError("this step has no current memory plan: compile a "
                              "CompiledProgram with BuildStrategy(enable_inplace=True)")
        if self.num_iterations != 1:
            raise GraphcError("memory plans describe one iteration; this step runs "
                              f"{self.num_iterations}")
        batch = self.batch_size(feed_shapes)
        ours, base = plan.predict(batch), plan.predict(batch, reuse=False)
        xla = self.memory_analysis(feed_shapes)
        return {
            "batch_size": batch,
            "predicted_arguments": ours.arguments, "predicted_outputs": ours.outputs,
            "predicted_donated": ours.donated, "predicted_temp_peak": ours.temp_peak,
            "predicted_total": ours.total, "predicted_peak": ours.peak,
            "predicted_peak_without_reuse": base.peak,
            "predicted_total_without_reuse": base.total,
            "xla_arguments": xla.argument_size_in_bytes, "xla_outputs": xla.output_size_in_bytes,
            "xla_alias": xla.alias_size_in_bytes, "xla_temp": xla.temp_size_in_bytes,
            "xla_total": (xla.temp_size_in_bytes + xla.argument_size_in_bytes
                          + xla.output_size_in_bytes - xla.alias_size_in_bytes),
            "xla_peak": getattr(xla, "peak_memory_in_bytes", -1),
        }


_NO_CHECKS = np.zeros((0, 4), np.int64)


def _same_type(a, b) -> bool:
    return getattr(a, "shape", None) == getattr(b, "shape", None) and \
        getattr(a, "dtype", None) == getattr(b, "dtype", None)


def _same_or_zeros(old, shape):
    """What a refused step returns for an update op's output: the state it was given when
    that has the output's type, else zeros (fetches, and state whose type changes)."""
    if old is not None and not isinstance(old, SelectedRows) and \
            tuple(old.shape) == tuple(shape.shape) and old.dtype == shape.dtype:
        return old
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shape)


def _keep_old_unless(good, new: tuple, old: Sequence) -> tuple:
    """``new`` where ``good``, else ``old`` (a state whose type changed keeps ``new``: there
    is no old value of its type to return; no program built by graphc's front end has one)."""
    return tuple(jnp.where(good, n, o) if n.shape == o.shape and n.dtype == o.dtype else n
                 for n, o in zip(new, old))


def _is_random(op: Op) -> bool:
    """Whether the op draws random numbers (RuleContext.rng folds in the run counter).

    A gradient op without its own rule re-runs its forward op, so that one counts too. A rule
    that draws without the RANDOM trait gets a None counter and fails loudly, never silently.
    """
    types = (op.type, forward_type(op.type))
    if any(t is not None and get_op_def(t).has_trait(RANDOM) for t in types):
        return True
    # -- issue 26: a random op inside a region (dropout in a branch) reads the counter too
    from ...ops.scan.defs import body_graph
    for r in get_op_def(forward_type(op.type) or op.type).regions:
        value = op.attrs.get(r)
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str) and any(_is_random(o) for o in body_graph(text).ops()):
                return True
    return False


def compile_step(graph: Graph, fetch: Sequence = (), donate: bool = True,
                 num_iterations: int = 1, check_data: bool = True,
                 services=None) -> CompiledStep:
    return CompiledStep(graph, fetch, donate, num_iterations, check_data, services)
