"""ps-slice-variables: cut every optimized parameter (and its gradient) into row blocks and place
each block on a parameter server (the first step of the parameter-server transpile).

Matches: each optimizer op's (Param, Grad) pair. Produces no ops: it records the plan on the
parameter's variable (``extra["ps_blocks"]``: index, param block, grad block, rows, endpoint),
which ps-trainer-graph and ps-server-graph read. A parameter cut in one block keeps its own
name (and its gradient's); blocks of a cut one are ``w.block0``, ``w@GRAD.block0``, ... A
distributed table (is_distributed lookups) is not cut: ``extra["ps_table"]`` lists the
servers its rows are sharded over (row r on server r % count).
Declines: a graph without optimizer ops (nothing to serve). See ps_plan.py for the rule.
"""

from __future__ import annotations

from pydantic import field_validator

from ...ir.graph import Graph
from ..infra.base import Pass, PassContext, register_pass
from .plan import (
    PLAN_KEY,
    SPLIT_METHODS,
    TABLE_KEY,
    Block,
    block_rows,
    distributed_tables,
    endpoint_of,
    updated_pairs,
)


@register_pass
class PsSliceVariables(Pass):
    """Cut optimized parameters into row blocks and place them on parameter servers."""

    name = "ps-slice-variables"
    regions = "decline"
    regions_reason = ("the parameter-server split acts on the outer graph's optimizer ops and "
                      "parameters; a region op is one op there and its body stays whole")
    endpoints: list[str] = ["127.0.0.1:6174"]
    slice_var_up: bool = True
    min_block_size: int = 8192
    split_method: str = "round_robin"

    @field_validator("endpoints")
    @classmethod
    def _endpoints(cls, value: list[str]) -> list[str]:
        if not value or any(not e for e in value) or len(set(value)) != len(value):
            raise ValueError(f"endpoints must be distinct non-empty names, got {value}")
        return value

    @field_validator("split_method")
    @classmethod
    def _method(cls, value: str) -> str:
        if value not in SPLIT_METHODS:
            raise ValueError(f"split_method must be one of {list(SPLIT_METHODS)}, got {value!r}")
        return value

    @field_validator("min_block_size")
    @classmethod
    def _min_block(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"min_block_size must be >= 1, got {value}")
        return value

    def run(self, graph: Graph, ctx: PassContext) -> None:
        pairs = updated_pairs(graph)
        if not pairs:
            ctx.decline("no optimizer ops: nothing for parameter servers to update")
            return
        tables = distributed_tables(graph)
        k = 0
        for _, param, grad in pairs:
            name, gname = param.var.name, grad.var.name
            if name in tables:
                param.var.extra[TABLE_KEY] = list(self.endpoints)
                ctx.count("distributed tables")
                continue
            if any(d < 0 for d in param.shape):
                ctx.decline(f"{name}: unknown shape, kept whole")
            rows = block_rows(param.shape, len(self.endpoints), self.min_block_size,
                              self.slice_var_up and all(d >= 0 for d in param.shape))
            blocks = []
            for i, (start, end) in enumerate(rows):
                split = len(rows) > 1
                pname = f"{name}.block{i}" if split else name
                blocks.append(Block(i, pname, f"{gname}.block{i}" if split else gname,
                                    start, end,
                                    endpoint_of(pname, k, self.endpoints, self.split_method)))
                k += 1
            param.var.extra[PLAN_KEY] = [b.as_list() for b in blocks]
            ctx.count("parameters")
            ctx.count("blocks", len(blocks))
            if len(blocks) > 1:
                ctx.count("split parameters")
