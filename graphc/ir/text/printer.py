"""Print a Graph as text deterministically: ops in stable topological order, attributes
equal to their defaults omitted, nested blocks (scan bodies) inline."""

from __future__ import annotations

import html
import json
import re
from typing import Any

from ..graph import Graph, Op, Value, VarInfo
from ..opdef import get_op_def as _get_op_def
from ..opdef import has_op_def
from ..types import TensorType, short_dtype

# ---------------------------------------------------------------------------- printing


_ENCODER = json.JSONEncoder(separators=(", ", ": "))  # json.dumps would build one per call


def _json(value: Any) -> str:
    return _ENCODER.encode(value)


def _default_stop_gradient(var: VarInfo) -> bool:
    return var.kind == "feed" or (var.kind == "param" and not var.trainable)


def var_flags(var: VarInfo) -> str:
    flags = [] if var.kind == "temp" else [var.kind]
    if var.stop_gradient != _default_stop_gradient(var):
        flags.append(f"stop_gradient={_json(var.stop_gradient)}")
    if var.kind == "param" and not var.trainable:
        flags.append("trainable=false")
    if var.learning_rate != 1.0:
        flags.append(f"learning_rate={_json(var.learning_rate)}")
    if var.shard is not None:
        flags.append(f"shard={_json([var.shard[0], list(var.shard[1])])}")
    if var.extra.get("stack_of"):  # stacked state: its members' names (roll-repeated-layers)
        flags.append(f"stack_of={_json(list(var.extra['stack_of']))}")
    return " {" + ", ".join(flags) + "}" if flags else ""


def format_type(t: TensorType) -> str:
    dense = f"{short_dtype(t.dtype)}[{','.join(map(str, t.shape))}]"
    if t.array:  # a tensor array: capacity first (docs/control_flow.md)
        return f"array<lod{t.element_lod}<{dense}>>" if t.element_lod else f"array<{dense}>"
    if t.lod_level:  # a LoD value: lod1<i64[-1,1]> (docs/lod.md)
        return f"lod{t.lod_level}<{dense}>"
    return f"selected_rows<{dense}>" if t.sparse else dense


# Regions (graph-valued attributes an op declares with register's ``regions``: a loop's
# body, a branch) print as indented blocks after their op's line, ``body @step {`` ...
# ``}``, and parse back to the same text (docs/control_flow.md).
_BLOCK_HEADER = re.compile(r'graph @([^\s,:()\[\]{}="]+)(\(random_seed=\d+\))? \{')


def _region_block(name: str, text) -> tuple[str, str, list[str]] | None:
    """(attribute, graph name, inner lines) of a region attribute printable as a block."""
    if not isinstance(text, str):
        return None
    lines = text.split("\n")
    m = _BLOCK_HEADER.fullmatch(lines[0])
    inner = lines[1:-2]
    if m is None or m.group(2) or lines[-2:] != ["}", ""] or not all(
            ln.startswith("  ") and ln.strip() and not ln.strip().startswith("//")
            for ln in inner):
        return None
    return name, m.group(1), inner


def _blocks_of(op: Op, opdef) -> list[tuple[str, str, list[str]]]:
    if opdef is None or not opdef.regions:
        return []
    blocks = []
    for r in opdef.regions:
        value = op.attrs.get(r)
        if isinstance(value, list):  # a list of graphs: every one a block, or all as JSON
            listed = [_region_block(r, v) for v in value]
            if listed and None not in listed:
                blocks += listed
        elif (b := _region_block(r, value)) is not None:
            blocks.append(b)
    return blocks


class _Printer:
    def __init__(self, graph: Graph, show_source: bool):
        self.graph, self.show_source = graph, show_source
        self.flagged: set[str] = set()

    def decl(self, v: Value) -> str:
        text = f"%{v.name}: {format_type(v.type)}"
        if v.var.name not in self.flagged:
            self.flagged.add(v.var.name)
            text += var_flags(v.var)
        return text

    def op_line(self, op: Op) -> str:
        g = self.graph
        ins, outs = g._io_for_reading(op)
        known = has_op_def(op.type)
        opdef = _get_op_def(op.type) if known else None
        single = opdef is not None and len(opdef.outputs) == 1 and not opdef.outputs[0].duplicable
        first = opdef.output_names[0] if single else None
        if single and list(outs) == [first] and len(outs[first]) == 1:
            lhs = self.decl(outs[first][0])
        else:
            parts = []
            for slot, vals in outs.items():
                dup = opdef is None or slot not in opdef._out or opdef._out[slot].duplicable
                body = ", ".join(self.decl(v) for v in vals)
                parts.append(f"{slot}=[{body}]" if dup else f"{slot}={body}")
            lhs = "(" + ", ".join(parts) + ")"
        args = []
        for slot, vals in ins.items():
            dup = opdef is None or slot not in opdef._in or opdef._in[slot].duplicable
            refs = ", ".join(f"%{v.name}" for v in vals)
            args.append(f"{slot}=[{refs}]" if dup else f"{slot}={refs}")
        attrs = []
        blocks = _blocks_of(op, opdef)
        as_blocks = {b[0] for b in blocks}
        for name, value in op.attrs.items():
            if name in as_blocks:
                continue
            adef = opdef.attrs.get(name) if opdef else None
            if adef is not None and value == adef.default and type(value) is type(adef.default):
                continue
            attrs.append(f"{name}={_json(value)}")
        if op.role != "forward":
            attrs.append(f"op_role={_json(op.role)}")
        line = f"  {lhs} = {op.type}({', '.join(args)})"
        if attrs:
            line += " {" + ", ".join(attrs) + "}"
        if self.show_source and op.source:
            path, _, lineno = op.source.rpartition(":")
            line += f"  loc({_json(path)}:{lineno})"
        # several regions follow one another on the closing line: ``  } false_body @f {``
        for name, graph_name, inner in blocks:
            line += f" {name} @{graph_name} {{\n" + "\n".join("  " + ln for ln in inner) + "\n  }"
        return line


def print_graph(graph: Graph, show_source: bool = False) -> str:
    p = _Printer(graph, show_source)
    header = f"graph @{graph.name}"
    if graph.random_seed:
        header += f"(random_seed={graph.random_seed})"
    lines = [header + " {"]
    lines += [f"  input {p.decl(v)}" for v in graph.inputs]
    lines += [p.op_line(op) for op in graph.ops()]
    lines += [f"  output %{v.name}" for v in graph.outputs]
    lines.append("}")
    return "\n".join(lines) + "\n"


def graph_html(graph: Graph) -> str:
    """The text form as HTML: op names bold, source lines dimmed (for notebooks)."""
    body = html.escape(graph.to_text(show_source=True))
    body = re.sub(r"= ([a-z0-9_]+)\(", r"= <b>\1</b>(", body)
    body = re.sub(r"(loc\(.*?\))", r'<span style="color:#888">\1</span>', body)
    return f'<pre style="font-size:12px;line-height:1.3">{body}</pre>'
