"""Drawing graphs: Graphviz (through the ``graphviz`` Python binding) to SVG for notebooks, with
ops clustered by layer, coloured by kind and rewritten ops highlighted; a text view otherwise.

``draw(graph)`` returns a :class:`GraphDrawing`. In a notebook it shows as SVG when Graphviz's
``dot`` executable is installed, and as the text view when it is not (``str()`` is always the
text view, ``.source`` always the DOT text).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable

from ..ir.graph import Graph, Op

# Op kind -> fill colour. First matching rule wins; grad ops get the pale variant.
KIND_COLOURS: dict[str, str] = {
    "collective": "#e6550d",  # all-reduce, reduce-scatter, broadcast, all-gather
    "fused": "#fdae6b",  # fused_* ops made by a pass
    "optimizer": "#74c476",  # sgd, momentum, adam, ...
    "matmul": "#6baed6",  # mul, matmul, conv2d, ...
    "norm": "#9e9ac8",  # batch_norm, layer_norm
    "activation": "#fdd0a2",
    "elementwise": "#c6dbef",
    "loss": "#fb6a4a",
    "other": "#d9d9d9",
}
GRAD_COLOURS = {"collective": "#fdbe85", "fused": "#fee6ce", "optimizer": "#c7e9c0",
                "matmul": "#deebf7", "norm": "#dadaeb", "activation": "#fff5eb",
                "elementwise": "#eff3ff", "loss": "#fcbba1", "other": "#f0f0f0"}
HIGHLIGHT = "#d62728"

_ACTIVATIONS = {"relu", "tanh", "sigmoid", "gelu", "leaky_relu", "softmax", "scale", "relu6",
                "swish", "hard_swish", "elu", "exp", "log", "sqrt", "square", "abs"}
_OPTIMIZERS = {"sgd", "momentum", "adam", "adamw", "lamb", "lars_momentum", "rmsprop",
               "adagrad", "coalesce_tensor"}
_LAYER = re.compile(r"^([A-Za-z][A-Za-z0-9]*(?:_[A-Za-z]+)*_\d+)\.")


def op_kind(op_type: str) -> str:
    """The colour group of an op type (see ``KIND_COLOURS``)."""
    t = op_type.removesuffix("_grad")
    if t.startswith(("c_", "all_reduce", "allreduce", "reduce_scatter", "all_gather",
                     "broadcast")) or "allreduce" in t or "all_reduce" in t:
        return "collective"
    if t.startswith("fused") or t.startswith("fuse_"):
        return "fused"
    if t in _OPTIMIZERS or t.startswith(("fused_sgd", "fused_momentum", "fused_adam")):
        return "optimizer"
    if t in ("mul", "matmul", "matmul_v2", "conv2d", "depthwise_conv2d", "conv2d_transpose"):
        return "matmul"
    if "norm" in t:
        return "norm"
    if t in _ACTIVATIONS:
        return "activation"
    if t.startswith("elementwise_") or t in ("sum", "sums"):
        return "elementwise"
    if "cross_entropy" in t or t in ("mean", "accuracy"):
        return "loss"
    return "other"


def layer_of(op: Op) -> str | None:
    """The layer an op belongs to, from its first output's name (``fc_0.tmp_1`` -> ``fc_0``,
    ``fc_0.w_0`` for an optimizer update -> ``fc_0``); None for ops outside any layer."""
    if op.type.endswith("_grad"):  # the layer of the forward op: the gradient it reads
        for values in op.inputs.values():
            for v in values:
                m = _LAYER.match(v.name)
                if m and v.name.endswith("@GRAD"):
                    return m.group(1)
    for values in op.outputs.values():
        for v in values:
            m = _LAYER.match(v.name)
            if m:
                return m.group(1)
    for values in op.inputs.values():  # e.g. a grad op writing only @GRAD of a feed
        for v in values:
            m = _LAYER.match(v.name)
            if m:
                return m.group(1)
    return None


def rewritten_ops(graph: Graph, passes: Iterable[str] | None = None) -> set[int]:
    """Ids of the ops a pass created (their provenance names it); only those of ``passes``
    when given."""
    wanted = None if passes is None else set(passes)
    out = set()
    for op in graph.ops():
        names = {p[1] for p in op.provenance if p and p[0] == "pass"}
        if names and (wanted is None or names & wanted):
            out.add(op.id)
    return out


def dot_available() -> bool:
    """Whether Graphviz's ``dot`` executable and the ``graphviz`` binding are both here."""
    if shutil.which("dot") is None:
        return False
    try:
        import graphviz  # noqa: F401
    except ImportError:
        return False
    return True


def _describe(op: Op) -> str:
    outs = ", ".join(f"%{v.name}" for vs in op.outputs.values() for v in vs)
    ins = ", ".join(f"%{v.name}" for vs in op.inputs.values() for v in vs)
    text = f"{outs or '()'} <- {ins or '()'}"
    return text if len(text) <= 110 else text[:107] + "..."


def _origin(op: Op) -> str:
    passes = [p[1] for p in op.provenance if p and p[0] == "pass"]
    ops = [p[0] for p in op.provenance if p and p[0] != "pass"]
    if not passes:
        return ""
    return f"  [{'+'.join(ops) or 'new'} by {', '.join(dict.fromkeys(passes))}]"


class GraphDrawing:
    """A drawn graph: ``source`` (DOT), ``text`` (the fallback view), ``svg()``; shows as SVG
    in Jupyter when ``dot`` is installed and as text otherwise."""

    def __init__(self, graph: Graph, changed: set[int], title: str, edge_labels: bool):
        self.graph, self.changed, self.title = graph, changed, title
        self.source = self._dot(edge_labels)
        self.text = self._text()

    # -- DOT -------------------------------------------------------------------------------
    def _dot(self, edge_labels: bool) -> str:
        g = self.graph
        lines = [f'digraph "{_q(self.title)}" {{',
                 '  graph [rankdir=TB, fontname="Helvetica", fontsize=11, nodesep=0.15, '
                 f'ranksep=0.3, newrank=true, label="{_q(self.title)}", labelloc=t'
                 # bound dot's network-simplex and crossing passes on big graphs: 320 ops
                 # lay out in seconds instead of minutes, at little cost in tidiness
                 + (", nslimit=2, nslimit1=2, mclimit=0.3" if g.num_ops > 100 else "") + "];",
                 '  node [shape=box, style="rounded,filled", fontname="Helvetica", '
                 'fontsize=9, height=0.25, margin="0.06,0.02", penwidth=0.6];',
                 '  edge [arrowsize=0.5, penwidth=0.6, fontsize=7, color="#555555"];']
        clusters: dict[str | None, list[Op]] = {}
        for op in g.ops():
            clusters.setdefault(layer_of(op), []).append(op)
        for layer, ops in clusters.items():
            indent = "  "
            if layer is not None:
                lines.append(f'  subgraph "cluster_{_q(layer)}" {{')
                lines.append(f'    label="{_q(layer)}"; style="rounded,dashed"; '
                             'color="#999999"; fontsize=9;')
                indent = "    "
            for op in ops:
                kind = op_kind(op.type)
                palette = GRAD_COLOURS if op.type.endswith("_grad") else KIND_COLOURS
                attrs = [f'label="{_q(op.type)}"', f'fillcolor="{palette[kind]}"',
                         f'tooltip="{_q(_describe(op))}"']
                if op.id in self.changed:
                    attrs += [f'color="{HIGHLIGHT}"', "penwidth=2.5",
                              f'fontcolor="{HIGHLIGHT}"']
                lines.append(f"{indent}op{op.id} [{', '.join(attrs)}];")
            if layer is not None:
                lines.append("  }")
        # graph inputs that are feeds get a node; parameters would only add clutter
        feeds = {}
        for op in g.ops():
            for vs in op.inputs.values():
                for v in vs:
                    if v.producer is None and v.var.kind == "feed":
                        feeds.setdefault(v.name, f"feed{len(feeds)}")
        for name, node in feeds.items():
            lines.append(f'  {node} [label="{_q(name)}", shape=plaintext, style="", '
                         'fontsize=9];')
        seen = set()
        for op in g.ops():
            for vs in op.inputs.values():
                for v in vs:
                    src = v.producer
                    tail = f"op{src.id}" if src is not None else feeds.get(v.name)
                    if tail is None or (tail, op.id, v.name) in seen:
                        continue
                    seen.add((tail, op.id, v.name))
                    label = f' [label="{_q(v.name)}"]' if edge_labels else ""
                    lines.append(f"  {tail} -> op{op.id}{label};")
        lines.append("}")
        return "\n".join(lines)

    # -- text ------------------------------------------------------------------------------
    def _text(self) -> str:
        g = self.graph
        clusters: dict[str, list[Op]] = {}
        for op in g.ops():
            clusters.setdefault(layer_of(op) or "(no layer)", []).append(op)
        width = max([len(op.type) for op in g.ops()] + [4])
        out = [f"{self.title}: {g.num_ops} ops in {len(clusters)} groups "
               f"(* = rewritten by a pass: {len(self.changed)})"]
        for layer, ops in clusters.items():
            out.append(f"[{layer}]")
            for op in ops:
                mark = "*" if op.id in self.changed else " "
                out.append(f"  {mark} {op.type:<{width}}  {op_kind(op.type):<11}  "
                           f"{_describe(op)}{_origin(op)}")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:  # what Jupyter shows when there is no SVG
        return self.text

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(self.text)

    # -- SVG -------------------------------------------------------------------------------
    def svg(self) -> str:
        """The SVG rendering; raises RuntimeError when ``dot`` is not installed."""
        if not dot_available():
            raise RuntimeError("Graphviz's 'dot' is not installed (apt-get install graphviz); "
                               "str(drawing) is the text view")
        import graphviz
        return graphviz.Source(self.source).pipe(format="svg", encoding="utf-8")

    def _repr_svg_(self) -> str | None:
        if not dot_available():
            return None  # Jupyter then shows __repr__: the text view
        try:
            return self.svg()
        except Exception:  # a broken Graphviz install must not break a notebook
            return None

    def save(self, path: str) -> str:
        """Write ``.svg`` (needs dot), ``.dot`` or ``.txt`` by the path's suffix."""
        text = (self.svg() if path.endswith(".svg") else
                self.source if path.endswith((".dot", ".gv")) else self.text)
        with open(path, "w") as f:
            f.write(text)
        return path


def draw(graph: Graph, changed: Iterable[int | Op] | None = None, *, title: str | None = None,
         edge_labels: bool | None = None) -> GraphDrawing:
    """Draw ``graph``. ``changed``: the ops to highlight (ids or Ops); default: every op a
    pass created (``rewritten_ops``). Edge labels (value names) default to on up to 60 ops."""
    if changed is None:
        ids = rewritten_ops(graph)
    else:
        ids = {c.id if isinstance(c, Op) else int(c) for c in changed}
    if edge_labels is None:
        edge_labels = graph.num_ops <= 60
    return GraphDrawing(graph, ids, title or f"graph ({graph.num_ops} ops)", edge_labels)


def _q(text: str) -> str:
    return str(text).replace("\\", "\\\\").replace('"', '\\"')
