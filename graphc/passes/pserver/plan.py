"""The parameter-server plan shared by the ps-* passes: which (parameter, gradient) pairs an
optimizer updates, how each is cut into row blocks, and which server owns each block.

Slicing (Paddle's rule): a variable of ``numel`` elements is cut into
``min(#servers, numel // min_block_size)`` blocks (at least 1) of ``ceil(numel / count)``
elements, rounded up to whole rows (a multiple of ``prod(shape[1:])``); the last block takes
the rest. Placement walks the blocks in optimizer order: ``round_robin`` gives the k-th
block the endpoint ``k % #servers``; ``hash_name`` the endpoint ``crc32(param block name) %
#servers`` (stable across processes and runs, unlike Python's salted ``hash``). Gradient
block i and parameter block i share one placement, so they always meet on one server.

A *distributed table* (an embedding looked up with ``is_distributed``) is not cut in blocks:
its rows live on every server, row ``r`` on server ``r % #servers`` (Paddle's sharding), are
drawn when first asked for, and travel as rows: trainers pull the rows a batch needs and
push row gradients (``distributed_tables``).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

from ...ir.graph import Graph, Op, Value
from ...ir.opdef import OPTIMIZER, get_op_def
from ..data_parallel import backward_gradient  # the gradient before optimize-role rewrites
from ..infra.base import PassError

SPLIT_METHODS = ("round_robin", "hash_name")
PLAN_KEY = "ps_blocks"  # VarInfo.extra key of a parameter's blocks (set by ps-slice-variables)
TABLE_KEY = "ps_table"  # VarInfo.extra key of a distributed table's shard endpoints
# what a server can do with a table's rows: the update it applies per row
TABLE_OPTIMIZERS = ("sgd",)


@dataclass(frozen=True)
class Block:
    """Rows ``[start, end)`` of a parameter (and its gradient), owned by ``endpoint``."""

    index: int
    param: str  # the block's parameter variable on the server
    grad: str  # the block's gradient variable on the trainer and the server
    start: int
    end: int
    endpoint: str

    def as_list(self) -> list:
        return [self.index, self.param, self.grad, self.start, self.end, self.endpoint]


def block_rows(shape: tuple[int, ...], nservers: int, min_block_size: int,
               slice_var_up: bool) -> list[tuple[int, int]]:
    """Row ranges ``[(start, end), ...]`` of a variable of ``shape`` (Paddle's slicing rule)."""
    rows = shape[0] if shape else 1
    numel = math.prod(shape) if shape else 1
    if not slice_var_up or numel <= 0:
        return [(0, rows)]
    count = max(1, min(nservers, numel // min_block_size))
    size = -(-numel // count)
    row_numel = math.prod(shape[1:]) if len(shape) > 1 else 1
    size += (-size) % row_numel  # whole rows
    per = size // row_numel
    return [(r, min(r + per, rows)) for r in range(0, rows, per)]


def endpoint_of(name: str, k: int, endpoints: list[str], method: str) -> str:
    if method == "round_robin":
        return endpoints[k % len(endpoints)]
    return endpoints[zlib.crc32(name.encode()) % len(endpoints)]


def optimizer_ops(graph: Graph) -> list[Op]:
    return [op for op in graph.ops() if get_op_def(op.type).has_trait(OPTIMIZER)]


def updated_pairs(graph: Graph) -> list[tuple[Op, Value, Value]]:
    """(optimizer op, parameter value it reads, backward gradient) in program order."""
    pairs = []
    for op in optimizer_ops(graph):
        params, grads = op.inputs.get("Param", []), op.inputs.get("Grad", [])
        if len(params) != 1 or len(grads) != 1:
            raise PassError(f"{op.where}: a fused optimizer op cannot be split over parameter "
                            "servers; transpile before fuse-all-optimizer-ops")
        bg = backward_gradient(graph, grads[0])
        if bg.type.sparse and bg is not grads[0]:
            raise PassError(f"{op.where}: the row-sparse gradient of '{params[0].var.name}' "
                            "(is_sparse embedding) is regularised or clipped before its "
                            "update: not supported on parameter servers yet "
                            "(docs/parameter_server.md, Status)")
        pairs.append((op, params[0], bg))
    return pairs


def blocks_of(graph: Graph, param_name: str) -> list[Block]:
    info = graph.vars.get(param_name)
    plan = info.extra.get(PLAN_KEY) if info is not None else None
    if plan is None:
        raise PassError(f"parameter '{param_name}' has no block plan: run ps-slice-variables "
                        "first")
    return [Block(*b) for b in plan]


@dataclass(frozen=True)
class Table:
    """A distributed table: the optimizer op updating it, its lookups and their gradients."""

    name: str
    height: int
    width: int
    dtype: str
    padding_idx: int
    optimizer: Op
    lookups: tuple  # forward lookup_table ops
    grads: tuple  # their lookup_table_grad ops
    learning_rate: Value


def _row_readers(graph: Graph, w: Value, distributed: bool) -> tuple[list, list, list]:
    """(lookups, lookup gradients, other readers) of the table ``w`` outside its update: a
    lookup counts when its is_distributed is ``distributed`` (and, not distributed, it is
    is_sparse)."""
    lookups, grads, others = [], [], []
    for op, _slot, _pos in graph.users(w):
        if op.role in ("optimize", "lr_sched"):
            continue
        mine = bool(op.attrs.get("is_distributed")) == distributed and (
            distributed or op.attrs.get("is_sparse"))
        if op.type == "lookup_table" and mine:
            lookups.append(op)
        elif op.type == "lookup_table_grad" and mine:
            grads.append(op)
        else:
            others.append(op)
    return lookups, grads, others


def distributed_tables(graph: Graph) -> dict[str, Table]:
    """Every parameter looked up with ``is_distributed`` (and updated by an optimizer), by
    name. Refuses (PassError) a table another op reads, lookups that disagree on
    ``is_distributed`` or ``padding_idx``, an update other than SGD, or a computed
    learning rate."""
    found: dict[str, list[Op]] = {}
    for op in graph.ops():
        if op.type == "lookup_table" and op.attrs.get("is_distributed"):
            found.setdefault(op.inputs["W"][0].var.name, []).append(op)
    tables = {}
    for opt in optimizer_ops(graph):
        params = opt.inputs.get("Param", [])
        if len(params) != 1 or params[0].var.name not in found:
            continue
        w = params[0]
        lookups, grads, others = _row_readers(graph, w, distributed=True)
        if others:
            raise PassError(f"{others[0].where}: reads the distributed table '{w.var.name}', "
                            "whose rows live on the parameter servers: only is_distributed "
                            "lookups may read it")
        pads = {op.attrs["padding_idx"] for op in lookups}
        if len(pads) > 1:
            raise PassError(f"lookups of the distributed table '{w.var.name}' disagree on "
                            f"padding_idx ({sorted(pads)})")
        if opt.type not in TABLE_OPTIMIZERS:
            raise PassError(f"{opt.where}: the distributed table '{w.var.name}' is updated "
                            f"by {opt.type}; its servers apply {list(TABLE_OPTIMIZERS)} to "
                            "rows (Paddle forces SGD): use fluid.optimizer.SGD, or "
                            "is_distributed=False")
        lr = opt.inputs["LearningRate"][0]
        if graph.producer(lr) is not None:
            raise PassError(f"{opt.where}: the distributed table '{w.var.name}' has a "
                            "computed learning rate (a schedule or ParamAttr learning_rate): "
                            "its servers take a constant one")
        height, width = w.shape
        tables[w.var.name] = Table(w.var.name, height, width, w.dtype, pads.pop() if pads
                                   else -1, opt, tuple(lookups), tuple(grads), lr)
    return tables


def prefetched_tables(graph: Graph) -> dict[str, Table]:
    """``is_sparse`` (not distributed) tables whose only readers are their lookups (and the
    update): Paddle's remote prefetch. Trainers then pull the rows a batch needs from the
    blocks' servers instead of receiving the whole table every step."""
    found = {}
    for opt in optimizer_ops(graph):
        params = opt.inputs.get("Param", [])
        if len(params) != 1 or len(params[0].shape) != 2:
            continue
        w = params[0]
        lookups, grads, others = _row_readers(graph, w, distributed=False)
        pads = {op.attrs["padding_idx"] for op in lookups}
        if others or not lookups or len(pads) > 1:
            continue
        height, width = w.shape
        found[w.var.name] = Table(w.var.name, height, width, w.dtype, pads.pop(), opt,
                                  tuple(lookups), tuple(grads), None)
    return found
