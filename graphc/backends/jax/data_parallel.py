"""A step mapped over data-parallel devices: ``jax.jit(jax.shard_map(step))`` on a mesh of
``(nranks // local, local)`` devices with axes ``Replicas.AXES``. All mapping lives here.

Each device runs the per-replica graph on its slice of the batch; the graph's own collective
ops (inserted by the data-parallel passes) are the only communication: ``check_vma`` is off,
so JAX adds no implicit gradient sums (JAX 0.10's shard_map would otherwise sum gradients of
replicated values a second time). State is replicated (``P()``) except variables the graph
marks ``shard`` (Reduce mode's optimizer state), which are ``[nranks, c]`` arrays split by
rows. Feeds are split along their batch dimension; every fetch is concatenated over devices
along dim 0 (a scalar per device becomes a vector of nranks), as Paddle's ParallelExecutor
merges fetched tensors; a row-sparse fetch stands for that concatenation (``replica_block``).

Over several processes (``jax.distributed``, graphc.distributed.init) the mesh holds every
process's devices; each process feeds its own batch (its slice of the global batch), gets
back the fetches of its own devices, and holds replicated state whole.

Places on one device (``devices`` names one device N times: CPU_NUM=N asked for after XLA's
CPU backend started with fewer): ``jax.jit(jax.vmap(step))`` over a place axis on that
device, with the same collectives over the vmap's named axis, so N places give the numbers
N devices give. Feeds and fetches are split and concatenated exactly as the mesh does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

from ...ir.errors import GraphcError
from ...ir.graph import Graph
from ..lod import LoDArray
from ..lowering import Replicas, replica_groups
from ..precision import with_graphc_x64
from ..selected_rows import SelectedRows, replica_block
from .step import CompiledStep


def make_mesh(devices: Sequence, local: int | None = None) -> Mesh:
    """Devices as a ``(groups, local)`` mesh; Mesh's axes are Auto, so unsharded inputs are
    accepted (``jax.make_mesh`` would make them Explicit and demand pre-sharded ones)."""
    n = len(devices)
    local = local or n
    if n % local:
        raise GraphcError(f"{n} devices do not form groups of {local} "
                          "(hierarchical_allreduce_inter_nranks)")
    return Mesh(np.asarray(devices, dtype=object).reshape(n // local, local), Replicas.AXES)


def feed_sharding(devices: Sequence, num_iterations: int = 1,
                  inter_nranks: int = 0) -> NamedSharding:
    """The sharding a DataParallelStep over ``devices`` expects of every feed: the batch
    dimension (dim 0, or dim 1 behind the K axis when ``num_iterations`` > 1) split over the
    mesh axes ``Replicas.AXES``. An array already placed with it goes into the step as is
    (graphc.io.DataLoader places its batches this way, ahead of the step)."""
    if places_share_a_device(devices):
        return SingleDeviceSharding(devices[0])  # the step splits the batch itself
    replicas = Replicas(len(devices), replica_groups(len(devices), inter_nranks))
    mesh = make_mesh(list(devices), replicas.local)
    return NamedSharding(mesh, P(Replicas.AXES) if num_iterations == 1
                         else P(None, Replicas.AXES))


def places_share_a_device(devices: Sequence) -> bool:
    """Whether ``devices`` are data-parallel places mapped onto one device (see the module
    doc); devices named twice but not all one device form no step."""
    devices = list(devices)
    if len(set(devices)) == len(devices):
        return False
    if len(set(devices)) != 1:
        raise GraphcError(f"data-parallel places must be distinct devices or all one device "
                          f"(places mapped onto it), got {devices}")
    return True


class PlaceReplicas(Replicas):
    """Replicas that are places on one device: every collective runs over the one named
    axis of the step's vmap (a flat group: hierarchical groups need real devices)."""

    __slots__ = ()

    def axes(self, group: str = "all"):
        return self.AXES[1]

    def axis_index(self):
        return self.index if self.index is not None else jax.lax.axis_index(self.AXES[1])


def _split(x, n: int, axis: int):
    """``x`` with its dim ``axis`` cut into ``n`` equal parts, the parts on a new dim 0."""
    shape = x.shape[:axis] + (n, x.shape[axis] // n) + x.shape[axis + 1:]
    return jnp.moveaxis(x.reshape(shape), axis, 0)


def _merge(x, axis: int):
    """Inverse of ``_split``: the parts on dim 0 concatenated along ``axis``."""
    x = jnp.moveaxis(x, 0, axis)
    return x.reshape(x.shape[:axis] + (x.shape[axis] * x.shape[axis + 1],) + x.shape[axis + 2:])


def to_rows(array, nranks: int):
    """A whole tensor as the ``[nranks, c]`` rows its replicas hold (zero padding at the end)."""
    flat = np.asarray(array).reshape(-1)
    c = -(-flat.size // nranks)
    return np.pad(flat, (0, nranks * c - flat.size)).reshape(nranks, c)


def from_rows(rows, shape) -> np.ndarray:
    """Inverse of ``to_rows`` (rows spread over processes are gathered first)."""
    if isinstance(rows, jax.Array) and not rows.is_fully_addressable:
        from jax.experimental import multihost_utils
        rows = multihost_utils.process_allgather(rows, tiled=True)
    return np.asarray(rows).reshape(-1)[:math.prod(shape)].reshape(shape)


# XLA:CPU (jaxlib 0.10.2) aborts in a collective's rendezvous ("Termination timeout for 'all
# gather RendezvousKey...'") when about 100 calls of a multi-device step with collectives are
# queued without waiting (a loop with no fetches); plain jit(shard_map) does too. A call waits
# for its own outputs once every SYNC_EVERY calls, so at most that many are ever in flight.
SYNC_EVERY = 8

class DataParallelStep(CompiledStep):
    """A CompiledStep whose graph runs once per device of ``devices`` (see the module doc)."""

    _drops_empty_checks = False  # its out_specs give the checks summary a place

    def __init__(self, graph: Graph, fetch: Sequence, devices: Sequence, inter_nranks: int = 0,
                 donate: bool = True, num_iterations: int = 1, check_data: bool = True,
                 services=None):
        self.devices = list(devices)
        self.nranks = len(self.devices)
        # a group size that forms no groups is a flat all-reduce (the pass declined it)
        groups = replica_groups(self.nranks, inter_nranks)
        self.on_one_device = places_share_a_device(self.devices)
        if self.on_one_device:
            if groups is not None:
                raise GraphcError(
                    f"hierarchical all-reduce needs {self.nranks} real devices, but the "
                    f"{self.nranks} places share one device (CPU_NUM was set after XLA's CPU "
                    "backend started): set CPU_NUM before the program starts, or turn off "
                    "BuildStrategy.use_hierarchical_allreduce")
            self.replicas, self.mesh = PlaceReplicas(self.nranks), None
        else:
            self.replicas = Replicas(self.nranks, groups)
            self.mesh = make_mesh(self.devices, self.replicas.local)
        me = jax.process_index()
        self.local_devices = [d for d in self.devices if d.process_index == me]
        self.multiprocess = len(self.local_devices) != len(self.devices)
        super().__init__(graph, fetch, donate, num_iterations, check_data, services)
        if self.on_one_device:
            self.feed_sharding = SingleDeviceSharding(self.devices[0])
        else:
            batch = P(Replicas.AXES) if num_iterations == 1 else P(None, Replicas.AXES)
            self.feed_sharding = NamedSharding(self.mesh, batch)
        self._calls = 0

    # -- specs -------------------------------------------------------------------------
    def state_spec(self, value) -> P:
        return P(Replicas.AXES) if value.var.shard is not None else P()

    def state_sharding(self, value):
        if self.on_one_device:
            return SingleDeviceSharding(self.devices[0])
        return NamedSharding(self.mesh, self.state_spec(value))

    def _jit(self, body):
        rows = P(Replicas.AXES)
        batch = rows if self.num_iterations == 1 else P(None, Replicas.AXES)
        in_specs = (tuple(self.state_spec(v) for v in self.updated_inputs),
                    tuple(self.state_spec(v) for v in self.readonly_inputs),
                    tuple(batch for _ in self.feed_inputs),
                    P() if self.uses_step_counter else None)
        out_specs = (tuple(self.state_spec(v) for v in self.updated_inputs),
                     tuple(self.state_spec(v) for v in self.created_outputs),
                     tuple(batch for _ in self.fetch_values),
                     P())  # data checks: summed over replicas, so every replica has them
        lead = 0 if self.num_iterations == 1 else 1

        def local(updated, readonly, feeds, step):
            new, created, fetched, checks = body(updated, readonly, feeds, step)
            # a per-replica scalar becomes [1], so the merged fetch is [nranks]; a row-sparse
            # fetch becomes its replica's block of the concatenation (see replica_block)
            # a LoD fetch keeps its device's bucket: the runtime unpacks every block
            fetched = tuple(replica_block(f, self.replicas.axis_index(), self.nranks)
                            if isinstance(f, SelectedRows) else f if isinstance(f, LoDArray)
                            else f.reshape(f.shape[:lead] + (1,)) if f.ndim == lead else f
                            for f in fetched)
            return new, created, fetched, checks

        if self.on_one_device:
            mapped = self._over_places(local, in_specs, out_specs)
        else:
            mapped = jax.shard_map(local, mesh=self.mesh, in_specs=in_specs,
                                   out_specs=out_specs, check_vma=False)
        return jax.jit(mapped, donate_argnums=(0,) if self.donate else ())

    def _over_places(self, local, in_specs, out_specs):
        """``local`` vmapped over the places, taking and giving what shard_map would: an
        input split over the mesh (``P(AXES)`` on its dim ``d``) is cut into per-place
        parts, a replicated one (``P()``) goes to every place whole; outputs are merged
        back the same way (a replicated output is place 0's, as every place has it)."""
        n = self.nranks

        def dim(spec):  # P(None, AXES): the batch behind the K axis
            return None if spec is None or spec == P() else (0 if spec[0] is not None else 1)

        def split(specs, values):
            return jax.tree.map(lambda s, v: v if dim(s) is None else jax.tree.map(
                lambda x: _split(x, n, dim(s)), v), specs, values,
                is_leaf=lambda s: isinstance(s, P) or s is None)

        def axes(specs):
            return jax.tree.map(lambda s: None if dim(s) is None else 0, specs,
                                is_leaf=lambda s: isinstance(s, P) or s is None)

        def merge(specs, values):
            return jax.tree.map(lambda s, v: jax.tree.map(
                (lambda x: x[0]) if dim(s) is None else (lambda x: _merge(x, dim(s))), v),
                specs, values, is_leaf=lambda s: isinstance(s, P))

        per_place = jax.vmap(local, in_axes=axes(in_specs), out_axes=0,
                             axis_name=Replicas.AXES[1])

        def mapped(*args):
            return merge(out_specs, per_place(*split(in_specs, args)))

        return mapped

    @with_graphc_x64
    def __call__(self, updated, readonly, feeds, step):
        self._calls += 1
        if not self.multiprocess:
            out = self._jitted(*self._args(updated, readonly, feeds, step))
            if self._calls % SYNC_EVERY == 0:
                jax.block_until_ready(out)
            return out
        # a multi-process step waits on its collectives here: under the services' deadline
        # (graphc.distributed's watchdog, set when the process joined its job)
        wait = None if self.services is None else self.services.collective_wait
        if wait is None:
            return self._call_multiprocess(updated, readonly, feeds, step)
        with wait("a data-parallel step"):
            return self._call_multiprocess(updated, readonly, feeds, step)

    def _call_multiprocess(self, updated, readonly, feeds, step):
        # this process's batch is its slice of the global one
        feeds = [jax.make_array_from_process_local_data(self.feed_sharding, np.asarray(f))
                 for f in feeds]
        new, created, fetched, checks = self._jitted(*self._args(updated, readonly, feeds,
                                                                 step))
        if self._calls % SYNC_EVERY == 0:
            jax.block_until_ready((new, created))
        return new, created, tuple(self._local_sparse(f) if isinstance(f, SelectedRows)
                                   else self._local_part(f) for f in fetched), checks

    def _local_part(self, array) -> np.ndarray:
        """This process's devices' pieces of a merged fetch, in device order."""
        lead = 0 if self.num_iterations == 1 else 1
        shards = sorted(array.addressable_shards, key=lambda s: s.index[lead].start or 0)
        return np.concatenate([np.asarray(s.data) for s in shards], axis=lead)

    def _local_sparse(self, sr: SelectedRows) -> SelectedRows:
        """This process's devices' blocks of a merged row-sparse fetch, renumbered as the
        concatenation of its own devices' tensors (as ``_local_part`` gives dense ones)."""
        mine = [r for r, d in enumerate(self.devices) if d.process_index == jax.process_index()]
        block = sr.height // self.nranks
        local_of = np.full(self.nranks + 1, len(mine), np.int64)  # the last: padding
        local_of[mine] = np.arange(len(mine))
        rows = self._local_part(sr.rows).astype(np.int64)
        rows = local_of[rows // block] * block + rows % block
        return SelectedRows(rows.astype(sr.rows.dtype), self._local_part(sr.values),
                            len(mine) * block)

    # -- state placement ---------------------------------------------------------------
    @with_graphc_x64
    def place_state(self, values, arrays: list) -> list:
        """``arrays`` (the scope's, in the order of ``values``) on this step's devices: whole
        tensors of sharded variables become their rows; anything on other devices moves."""
        out = []
        for v, arr in zip(values, arrays):
            sharding = self.state_sharding(v)
            if v.var.shard is not None and tuple(arr.shape) == tuple(v.var.shard[1]):
                arr = to_rows(arr, self.nranks)
            if getattr(arr, "sharding", None) != sharding:
                # across processes, a process-local array is first brought to the host
                arr = jax.device_put(np.asarray(arr) if self.multiprocess else arr, sharding)
            out.append(arr)
        return out

    def global_type_shape(self, value) -> tuple:
        """The shape of ``value`` across all devices (rows for sharded state)."""
        if value.var.shard is not None:
            return (self.nranks, value.type.shape[1])
        return value.type.shape

    def abstract_args(self, feed_shapes=None) -> tuple:
        updated, readonly, feeds, step = super().abstract_args(feed_shapes)

        def whole(values, specs):
            return [jax.ShapeDtypeStruct(self.global_type_shape(v), s.dtype)
                    for v, s in zip(values, specs)]

        return (tuple(whole(self.updated_inputs, updated)),
                tuple(whole(self.readonly_inputs, readonly)), feeds, step)
