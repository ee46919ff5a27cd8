"""The parameter-server plan shared by the ps-* passes: which (parameter, gradient) pairs an
optimizer updates, how each is cut into row blocks, and which server owns each block.

Slicing (Paddle's rule): a variable of ``numel`` elements is cut into
``min(#servers, numel // min_block_size)`` blocks (at least 1) of ``ceil(numel / count)``
elements, rounded up to whole rows (a multiple of ``prod(shape[1:])``); the last block takes
the rest. Placement walks the blocks in optimizer order: ``round_robin`` gives the k-th
block the endpoint ``k % #servers``; ``hash_name`` the endpoint ``crc32(param block name) %
#servers`` (stable across processes and runs, unlike Python's salted ``hash``). Gradient
block i and parameter block i share one placement, so they always meet on one server.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass

from ..ir.graph import Graph, Op, Value
from ..ir.ops import OPTIMIZER, get_op_def
from .base import PassError
from .data_parallel import backward_gradient  # the gradient before optimize-role rewrites

SPLIT_METHODS = ("round_robin", "hash_name")
PLAN_KEY = "ps_blocks"  # VarInfo.extra key of a parameter's blocks (set by ps-slice-variables)


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
