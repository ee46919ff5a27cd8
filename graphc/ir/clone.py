"""A structural copy of an SSA graph, so one lowering can feed several rewrites: the
parameter-server transpile slices the main program once, then splits a copy per role.

The copy has its own ops, values and variable records (same ids, names, types, attrs and
order), so rewriting it leaves the original untouched; it is about as cheap as lowering,
several times cheaper than ``copy.deepcopy``.
"""

from __future__ import annotations

import copy
import itertools

from .graph import Graph, Op, Value, VarInfo, gc_paused


@gc_paused
def clone_graph(graph: Graph) -> Graph:
    """A copy of ``graph`` that passes may rewrite independently of it.

    Attribute values and ``VarInfo.extra`` values are shared, as lowering shares them with
    the Program (passes replace them, never edit them in place). Listeners and the memory
    plan (an analysis of the original's values) are not copied.
    """
    g = Graph(graph.name)
    g.random_seed = graph.random_seed
    infos: dict[int, VarInfo] = {}

    def info_of(info: VarInfo) -> VarInfo:
        new = infos.get(id(info))
        if new is None:
            new = copy.copy(info)
            new.extra = dict(info.extra)
            infos[id(info)] = new
        return new

    g.vars = {name: info_of(info) for name, info in graph.vars.items()}
    node: dict = {}  # original node -> its copy
    add_node = g.nx.add_node
    for n in graph.nx:  # node order kept: users() and the stable order read it
        if isinstance(n, Value):
            new = Value(g, n.name, info_of(n.var), n.version, n.type)
        else:
            new = Op(g, n.id, n.type, dict(n.attrs), n.source, n.role, n.seq, n.provenance)
            new.stream_key = n.stream_key
        node[n] = new
        add_node(new)
    add_edge = g.nx.add_edge
    for u, adjacent in graph._succ.items():  # per-node successor order kept
        nu = node[u]
        for v, keys in adjacent.items():
            nv = node[v]
            for key in keys:
                add_edge(nu, nv, key=key)
    g.values = {name: node[v] for name, v in graph.values.items()}
    g._versions = {name: {ver: node[v] for ver, v in versions.items()}
                   for name, versions in graph._versions.items()}
    g.ops_by_id = {i: node[op] for i, op in graph.ops_by_id.items()}
    g.inputs = [node[v] for v in graph.inputs]
    g.outputs = [node[v] for v in graph.outputs]
    g._outputs_version += 1
    # new ops get ids above every existing one, so (seq, id) ties order as in the original
    g._ids = itertools.count(max(graph.ops_by_id, default=-1) + 1)
    g._version += 1
    return g
