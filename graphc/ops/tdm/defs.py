"""TDM's tree ops (Paddle 1.8's fluid.contrib.layers: tdm_child, tdm_sampler) and index_sample,
the per-row gather their beam search uses. The tree tables are int parameters."""

from __future__ import annotations

from ...ir.opdef import NO_GRAD, RANDOM, register
from ...ir.types import FLOAT_DTYPES, INT_DTYPES, TensorType

_IDS = frozenset({"int32", "int64"})


def _ids(c, slot: str):
    t = c.x(slot)
    c.check(t.dtype in _IDS, f"{slot} must hold int32 or int64 ids, got {t.dtype}")
    return t


def _tdm_child(c):
    x, info = _ids(c, "X"), _ids(c, "TreeInfo")
    n = c["child_nums"]
    c.check(n > 0, f"child_nums must be > 0, got {n}")
    c.check(info.rank == 2, f"TreeInfo must be [node_nums, 3 + child_nums], got "
                            f"{list(info.shape)}")
    c.check(info.shape[1] < 0 or info.shape[1] >= 3 + n,
            f"TreeInfo {list(info.shape)} has no room for item, layer, parent and {n} children "
            f"per node (3 + child_nums = {3 + n} columns)")
    c.check(c["dtype"] in _IDS, f"dtype must be int32 or int64, got {c['dtype']}")
    out = TensorType((*x.shape, n), c["dtype"])
    return {"Child": out, "LeafMask": out}


# TreeInfo row of node k: [item_id, layer_id, parent_id, child_0 .. child_{n-1}], zeros where a
# node has fewer children. A node has children when it is not 0 (the padding node) and its
# first child is not 0; a child is a leaf when its own item_id is not 0. Out-of-range ids are a
# data error, as Paddle's enforce.
register("tdm_child", "X TreeInfo", "Child LeafMask",
         {"child_nums": "int", "dtype": ("dtype", "int32")}, infer=_tdm_child, traits=(NO_GRAD,),
         lod_inputs=("X",), lod_outputs={"Child": ("X",), "LeafMask": ("X",)},
         doc="Child = the child_nums children of each node id in X (0 for none), LeafMask = "
             "1 where a child is a leaf (has an item id)")


def _tdm_sampler(c):
    x, travel, layer = _ids(c, "X"), _ids(c, "Travel"), _ids(c, "Layer")
    negs, offsets = list(c["neg_samples_num_list"]), list(c["layer_offset_lod"])
    c.check(bool(negs), "neg_samples_num_list must name at least one layer")
    c.check(len(offsets) == len(negs) + 1 and offsets[0] == 0 and
            all(b > a for a, b in zip(offsets, offsets[1:])),
            f"layer_offset_lod {offsets} must be 0 then the increasing end of each of the "
            f"{len(negs)} layers in Layer")
    for i, (k, a, b) in enumerate(zip(negs, offsets, offsets[1:])):
        c.check(0 <= k < b - a, f"layer {i} has {b - a} nodes: it takes 0 to {b - a - 1} "
                                f"negative samples (the positive excluded), got {k}")
    c.check(x.rank >= 1 and all(d == 1 for d in x.shape[1:]),
            f"X must hold one leaf (item) id per row, [batch] or [batch, 1], got "
            f"{list(x.shape)}")
    c.check(travel.rank == 2 and travel.shape[1] in (-1, len(negs)),
            f"Travel must be [leaf_node_num, {len(negs)} layers], got {list(travel.shape)}")
    c.check(layer.rank == 2 and layer.shape[1] in (-1, 1) and
            layer.shape[0] in (-1, offsets[-1]),
            f"Layer must be [{offsets[-1]}, 1] (every layer's node ids), got "
            f"{list(layer.shape)}")
    c.check(travel.dtype == layer.dtype, f"Travel is {travel.dtype} but Layer {layer.dtype}")
    c.check(c["dtype"] in _IDS, f"dtype must be int32 or int64, got {c['dtype']}")
    width = sum(negs) + len(negs) * int(c["output_positive"])
    out = TensorType((x.shape[0], width), c["dtype"])
    return {"Out": out, "Labels": out, "Mask": out}


# For each leaf id in X and each layer: the leaf's ancestor there (Travel[id, layer]; 0 is
# padding: the layer's slots are then all 0 with Mask 0), label 1, when output_positive,
# then neg_samples_num_list[layer] distinct other nodes of that layer drawn uniformly, label 0.
# A non-zero seed draws the same samples every run, as Paddle's kernel builds its sampler
# from the seed each run; seed 0 draws afresh each step.
register("tdm_sampler", "X Travel Layer", "Out Labels Mask",
         {"neg_samples_num_list": "ints", "output_positive": ("bool", True),
          "layer_offset_lod": "ints", "seed": ("int", 0), "dtype": ("dtype", "int32")},
         infer=_tdm_sampler, traits=(RANDOM, NO_GRAD),
         doc="Out = per layer the leaf's ancestor (Labels 1) and random other nodes of that "
             "layer (Labels 0); Mask 0 marks padding layers")


def _index_sample(c):
    x, index = c.x("X"), _ids(c, "Index")
    c.check(x.rank == 2 and index.rank == 2,
            f"X and Index must be 2-D, got {list(x.shape)} and {list(index.shape)}")
    c.check(x.shape[0] < 0 or index.shape[0] < 0 or x.shape[0] == index.shape[0],
            f"X {list(x.shape)} and Index {list(index.shape)} must have as many rows")
    c.check(x.dtype in FLOAT_DTYPES | INT_DTYPES, f"X of {x.dtype} is not a number type")
    rows = x.shape[0] if x.shape[0] >= 0 else index.shape[0]
    return {"Out": TensorType((rows, index.shape[1]), x.dtype)}


register("index_sample", "X Index", "Out", infer=_index_sample,
         doc="Out[i, j] = X[i, Index[i, j]]")
