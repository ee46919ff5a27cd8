"""Textual IR: print a Graph deterministically and parse it back to an equal Graph.

Ops appear in stable topological order; attributes equal to their defaults are omitted.
"""

from .equality import structural_key
from .parser import parse
from .printer import _Printer, format_type, graph_html, print_graph, var_flags

__all__ = ["_Printer", "format_type", "graph_html", "parse", "print_graph", "structural_key",
           "var_flags"]
