"""Parameter-server ops: what a trainer exchanges with the servers that own its parameters'
blocks (send gradient blocks, barriers, receive parameter blocks), as the transpile emits them.

Each op returns a small int32 ``[1]`` *token* (send, send_barrier) so that the order the
protocol needs (every send before the barrier, the barrier before any recv) is a data
dependency in the SSA graph, not only program order. ``epmap`` names the endpoint of each
block, ``varnames`` the block's name on that server (docs/parameter_server.md).
"""

from __future__ import annotations

from ...ir.opdef import COLLECTIVE, NO_GRAD, InferContext, register
from ...ir.types import INT_DTYPES, TensorType, sparse_type

TOKEN = TensorType((1,), "int32")
_TRAITS = (COLLECTIVE, NO_GRAD)


def _check_blocks(c: InferContext, n: int) -> None:
    c.check(len(c["epmap"]) == n, f"epmap has {len(c['epmap'])} endpoints for {n} blocks")
    c.check(len(c["varnames"]) == n, f"varnames has {len(c['varnames'])} names for {n} blocks")


def _send(c: InferContext):
    xs = c.xs("X")
    c.check(len(xs) >= 1, "send needs at least one block")
    c.check(all(not t.sparse for t in xs), "send takes dense blocks (row-sparse gradients are "
                                          "not supported by the parameter-server mode yet)")
    _check_blocks(c, len(xs))
    return {"Out": TOKEN}


def _barrier(c: InferContext):
    c.check(all(t == TOKEN for t in c.xs("X")), "a barrier reads tokens of send/recv ops")
    return {"Out": TOKEN}


def _recv(c: InferContext):
    shapes, ranks = c["shapes"], c["ranks"]
    c.check(sum(ranks) == len(shapes), f"ranks {ranks} do not add up to the {len(shapes)} "
                                       "dims in shapes")
    _check_blocks(c, len(ranks))
    outs, i = [], 0
    for r in ranks:
        outs.append(TensorType(tuple(shapes[i:i + r]), c["dtype"]))
        i += r
    return {"Out": outs}


def _fetch_barrier(c: InferContext):
    return {"Out": list(c.xs("X"))}


_BLOCK_ATTRS = {"epmap": "strs", "varnames": "strs", "trainer_id": ("int", 0)}

register("send", "X*", "Out", dict(_BLOCK_ATTRS), infer=_send, traits=_TRAITS,
         doc="hand each gradient block X[i] to the server epmap[i] (as varnames[i]); Out is a "
             "token")
register("send_barrier", "X*", "Out", {"endpoints": "strs", "trainer_id": ("int", 0)},
         infer=_barrier, traits=_TRAITS,
         doc="tell every server this trainer has sent all its blocks of the step (sync mode); "
             "X are the send tokens")
register("recv", "X*?", "Out*", {**_BLOCK_ATTRS, "shapes": "ints", "ranks": "ints",
                                 "dtype": ("dtype", "float32"), "initial": ("bool", False)},
         infer=_recv, traits=_TRAITS,
         doc="the parameter blocks varnames[i] from the servers epmap[i] after their update; "
             "X: tokens it waits for (the send barrier); initial: the servers' initial "
             "blocks instead (a trainer's startup program)")
register("fetch_barrier", "X*", "Out*", {"endpoints": "strs", "trainer_id": ("int", 0)},
         infer=_fetch_barrier, traits=_TRAITS, inplace={"Out": "X"},
         doc="every server has answered this step's receives; Out is X (the received blocks)")


def _geo(c: InferContext):
    olds, news = c.xs("Old"), c.xs("X")
    c.check(len(olds) == len(news), f"{len(olds)} Old values for {len(news)} parameters")
    c.check(all(a == b for a, b in zip(olds, news)), "Old and X must pair up by type")
    c.check(len(c["params"]) == len(news), "params names every parameter")
    c.check(sum(c["counts"]) == len(c["blocks"]) == len(c["starts"]) == len(c["ends"])
            == len(c["epmap"]), "counts, blocks, starts, ends and epmap disagree")
    c.check(c["push_nums"] >= 1, f"push_nums must be >= 1, got {c['push_nums']}")
    return {"Out": list(news)}


register("geo_sgd_exchange", "Old* X*", "Out*",
         {"params": "strs", "blocks": "strs", "starts": "ints", "ends": "ints", "counts": "ints",
          "epmap": "strs", "push_nums": "int", "trainers": "int", "trainer_id": ("int", 0)},
         infer=_geo, traits=_TRAITS,
         doc="GEO-SGD: every push_nums-th call, push each block's delta (X - the last synced "
             "value) / trainers to its server and take the server's value back; Out is X "
             "otherwise. Old: the parameters as the step read them (the first synced value)")


# -- row exchange: distributed tables and row-sparse gradients ------------------------------
def _ids(c: InferContext):
    ids = c.x("Ids")
    c.check(ids.dtype in INT_DTYPES, f"Ids must be integer, got {ids.dtype}")
    c.check(ids.rank >= 1 and ids.shape[-1] in (1, -1),
            f"Ids must end in a dimension of 1, got {list(ids.shape)}")
    c.check(c["height"] >= 1 and c["width"] >= 1,
            f"height and width must be positive, got {c['height']} x {c['width']}")
    return ids


_TABLE_ATTRS = {"table_name": "str", "height": "int", "width": "int",
                "dtype": ("dtype", "float32"), "padding_idx": ("int", -1)}

def _pull(c: InferContext):
    ids = _ids(c)
    c.check(len(c["epmap"]) >= 1, "epmap names the servers holding the table's rows")
    c.check(c["split"] in ("mod", "range"), f"split is 'mod' or 'range', got {c['split']!r}")
    if c["split"] == "range":
        c.check(len(c["sections"]) == len(c["epmap"]) == len(c["varnames"])
                and sum(c["sections"]) == c["height"],
                f"sections {c['sections']} must cut the {c['height']} rows into one range per "
                "block of varnames / epmap")
    return {"Out": TensorType(ids.shape[:-1] + (c["width"],), c["dtype"])}


register("distributed_lookup_table", "Ids", "Out",
         {**_TABLE_ATTRS, "epmap": "strs", "trainer_id": ("int", 0), "split": ("str", "mod"),
          "sections": ("ints", []), "varnames": ("strs", [])}, infer=_pull,
         traits=_TRAITS, lod_inputs=("Ids",),  # one row per token
         doc="embedding lookup from a table whose rows live on the servers: pull each distinct "
             "id of Ids once; split 'mod' (a distributed table): row r from server "
             "epmap[r % len]; 'range' (an is_sparse table cut in blocks, Paddle's remote "
             "prefetch): block i (sections[i] rows, named varnames[i]) from epmap[i]; zeros "
             "at padding_idx")


def _rows_grad(c: InferContext):
    _ids(c)
    dout = c.x("Out@GRAD")
    c.check(dout.shape[-1] in (c["width"], -1),
            f"Out@GRAD must end in the table width {c['width']}, got {list(dout.shape)}")
    return {"W@GRAD": sparse_type((c["height"], c["width"]), c["dtype"])}


register("distributed_lookup_table_grad", "Ids Out@GRAD", "W@GRAD", dict(_TABLE_ATTRS),
         infer=_rows_grad, traits=_TRAITS, lod_inputs=("Ids", "Out@GRAD"), lod="aware",
         doc="the row-sparse gradient of a server-held table: one row per id of Ids, its "
             "values Out@GRAD's (padding_idx ids are padding rows); lookup_table_grad "
             "without the table")


def _send_rows(c: InferContext):
    x = c.x("X")
    c.check(x.sparse, f"X must be row-sparse (a table's gradient), got the dense {x}")
    c.check(len(c["epmap"]) == len(c["varnames"]) >= 1, "one varname per endpoint in epmap")
    c.check(c["split"] in ("mod", "range"), f"split is 'mod' or 'range', got {c['split']!r}")
    if c["split"] == "range":
        c.check(len(c["sections"]) == len(c["epmap"]) and sum(c["sections"]) == x.shape[0],
                f"sections {c['sections']} must cut the {x.shape[0]} rows into one range per "
                "block")
    return {"Out": TOKEN}


register("send_rows", "X", "Out",
         {"epmap": "strs", "varnames": "strs", "split": ("str", "mod"), "sections": ("ints", []),
          "trainer_id": ("int", 0)}, infer=_send_rows, traits=_TRAITS, sparse_inputs=("X",),
         doc="push the rows of a row-sparse gradient to their servers, repeated rows summed: "
             "split 'mod' (a distributed table) sends row r to epmap[r % len] as "
             "varnames[r % len]; 'range' (an is_sparse table cut in blocks) sends the rows of "
             "block i (sections[i] rows) to epmap[i], rebased to the block; Out is a token")


register("ps_server_sum", "X", "Out", {}, infer=lambda c: {"Out": c.x("X")}, traits=_TRAITS,
         doc="on a parameter server: X summed over every server of the job (the squared "
             "global norm of gradients whose blocks live on several servers)")
