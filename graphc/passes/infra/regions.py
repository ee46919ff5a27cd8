"""Passes and regions (a loop's body, a branch: graph text in an op's attribute): every pass
declares ``regions = "recurse"`` (it runs on each body too) or ``"decline"`` (with a reason).

The PassManager calls ``apply_in_regions`` after a pass ran on a graph. ``recurse`` parses each
body, runs the pass on it (and on the bodies nested in it), and writes the new text back
through the outer graph's Rewriter (``set_attr``); the body's statistics join the pass's as
``<key> (in regions)``. ``decline`` leaves the bodies as they are and records
``skipped: inside regions: <reason>`` once per region op. Either way the pass has treated
each region op as one op of its graph: its operands and results are ordinary values there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ...ir.grad_defs import forward_type
from ...ir.graph import Graph, Op
from ...ir.opdef import get_op_def
from ...ir.rewriter import Rewriter
from ...ir.text import parse

RECURSE, DECLINE = "recurse", "decline"
MODES = (RECURSE, DECLINE)
IN_REGIONS = " (in regions)"


def region_texts(op: Op) -> list[tuple[str, str]]:
    """``(attribute, graph text)`` of each non-empty region ``op`` holds."""
    return [(r, t) for r in get_op_def(op.type).regions
            if isinstance(t := op.attrs.get(r), str) and t]


def region_ops(graph: Graph) -> list[Op]:
    """The ops of ``graph`` holding at least one region, in the stable order."""
    # asked after every pass: look at each op type once, and order only when one has regions
    types = {op.type for op in graph.ops_by_id.values()}
    holders = {t for t in types if get_op_def(t).regions}
    if not holders:
        return []
    return [op for op in graph.ops() if op.type in holders and region_texts(op)]


def for_each_region(graph: Graph, fn: Callable[[Graph, Op, str], bool],
                    rewriter: Rewriter, ops: Iterable[Op] | None = None) -> int:
    """Call ``fn(body, op, attribute)`` on a fresh parse of every region of ``graph`` (of
    ``ops`` only, when given); where it returns True (it changed ``body``) the body's new
    text replaces the attribute, through ``rewriter``. Returns the number rewritten."""
    rewritten = 0
    for op in region_ops(graph) if ops is None else ops:
        for attr, text in region_texts(op):
            body = parse(text)
            if fn(body, op, attr):
                new = body.to_text()
                if new != text:
                    rewriter.set_attr(op, attr, new)
                    rewritten += 1
    return rewritten


def region_bodies(op: Op) -> list[Graph]:
    """``op``'s regions parsed (fresh graphs: the caller may read or edit them)."""
    return [parse(text) for _, text in region_texts(op)]


def acts_in_regions(op: Op, traits: Iterable[str]) -> bool:
    """Whether an op inside ``op``'s regions, at any depth, has one of ``traits`` (a grad op
    counts its forward op's traits): a region op whose body calls the host or communicates
    acts beyond its results, as that body op does."""
    traits = frozenset(traits)
    for body in region_bodies(op):
        for inner in body.ops():
            fwd = forward_type(inner.type)
            found = get_op_def(inner.type).traits | (
                get_op_def(fwd).traits if fwd is not None else frozenset())
            if found & traits or acts_in_regions(inner, traits):
                return True
    return False


def apply_in_regions(p, graph: Graph, ctx) -> None:
    """After ``p`` ran on ``graph``: run it inside the regions, or record why not."""
    from .base import PassContext
    # region ops the pass itself made (roll-repeated-layers' scans) are its output, not input
    ops = [op for op in region_ops(graph) if ("pass", p.name) not in op.provenance]
    if not ops:
        return
    mode = getattr(p, "regions", DECLINE)
    if mode != RECURSE:
        reason = getattr(p, "regions_reason", "") or "the pass does not say it works inside"
        ctx.decline(f"inside regions: {reason}", len(ops))
        return

    def run_body(body: Graph, op: Op, attr: str) -> bool:
        inner = PassContext(body, p.name, (), ctx.num_devices)
        p.run(body, inner)
        apply_in_regions(p, body, inner)
        for key, n in inner.stats.items():
            ctx.count(key if key.endswith(IN_REGIONS) else key + IN_REGIONS, n)
        return inner.changed

    for_each_region(graph, run_body, ctx.rewriter, ops)
