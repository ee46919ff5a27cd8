"""Paddle 1.8's tree-based deep model layers (``fluid.contrib.layers.tdm_child``,
``tdm_sampler``) and ``index_sample``, the per-row gather TDM's beam search uses (nlp24)."""

from __future__ import annotations

from ..build.initializer import Constant
from ..ir.errors import ProgramError
from .helper import LayerHelper, check_variable
from .manipulation import slice as _slice
from .tensor import reshape


def _int_dtype(layer: str, what: str, dtype) -> str:
    name = str(dtype)
    if name not in ("int32", "int64"):
        raise ProgramError(f"{layer}: {what} must be 'int32' or 'int64', got {dtype!r}")
    return name


def tdm_child(x, node_nums, child_nums, param_attr=None, dtype="int32"):
    """(child, leaf_mask): the ``child_nums`` children of each node id in ``x`` (0 where a
    node has none) and 1 where a child is a leaf, from the tree-info parameter
    ``[node_nums, 3 + child_nums]`` (item id, layer id, parent id, children per node)."""
    check_variable("tdm_child", "x", x)
    dtype = _int_dtype("tdm_child", "dtype", dtype)
    helper = LayerHelper("tdm_child", None)
    info = helper.create_parameter(param_attr, [node_nums, 3 + child_nums], dtype,
                                   default_initializer=Constant(0))
    info.stop_gradient = True
    child = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    mask = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    helper.append_op("tdm_child", {"X": x, "TreeInfo": info},
                     {"Child": child, "LeafMask": mask},
                     {"child_nums": int(child_nums), "dtype": dtype})
    return child, mask


def tdm_sampler(x, neg_samples_num_list, layer_node_num_list, leaf_node_num,
                tree_travel_attr=None, tree_layer_attr=None, output_positive=True,
                output_list=True, seed=0, tree_dtype="int32", dtype="int32"):
    """(out, labels, mask): for each leaf id in ``x``, layer by layer, its ancestor (label 1,
    with ``output_positive``) and ``neg_samples_num_list[layer]`` other nodes of the layer
    drawn at random (label 0); mask 0 marks a layer the leaf's path does not reach. With
    ``output_list`` each is a list of ``[batch, samples, 1]`` per layer, else ``[batch,
    all samples]``. The travel ``[leaf_node_num, layers]`` and layer ``[nodes, 1]`` tables
    are parameters named by the two attrs."""
    check_variable("tdm_sampler", "x", x)
    tree_dtype = _int_dtype("tdm_sampler", "tree_dtype", tree_dtype)
    dtype = _int_dtype("tdm_sampler", "dtype", dtype)
    negs, counts = [int(n) for n in neg_samples_num_list], [int(n) for n in layer_node_num_list]
    if len(negs) != len(counts):
        raise ProgramError(f"tdm_sampler: neg_samples_num_list has {len(negs)} layers but "
                           f"layer_node_num_list {len(counts)}")
    for i, (k, n) in enumerate(zip(negs, counts)):
        if k >= n:
            raise ProgramError(f"tdm_sampler: layer {i} has {n} nodes, so fewer than {n} "
                               f"negative samples, got {k}")
    offsets = [0]
    for n in counts:
        offsets.append(offsets[-1] + n)
    if leaf_node_num is None or leaf_node_num >= offsets[-1]:
        raise ProgramError(f"tdm_sampler: leaf_node_num ({leaf_node_num}) must be below the "
                           f"total node count {offsets[-1]}")
    helper = LayerHelper("tdm_sampler", None)
    travel = helper.create_parameter(tree_travel_attr, [leaf_node_num, len(counts)],
                                     tree_dtype, default_initializer=Constant(0))
    layer = helper.create_parameter(tree_layer_attr, [offsets[-1], 1], tree_dtype,
                                    default_initializer=Constant(0))
    outs = [helper.create_variable_for_type_inference(dtype, stop_gradient=True)
            for _ in range(3)]
    helper.append_op("tdm_sampler", {"X": x, "Travel": travel, "Layer": layer},
                     dict(zip(("Out", "Labels", "Mask"), outs)),
                     {"neg_samples_num_list": negs, "output_positive": bool(output_positive),
                      "layer_offset_lod": offsets, "seed": int(seed), "dtype": dtype})
    if not output_list:
        return tuple(outs)
    lists, start = ([], [], []), 0
    for k in negs:
        end = start + k + int(bool(output_positive))
        for i, v in enumerate(outs):
            part = reshape(_slice(v, axes=[1], starts=[start], ends=[end]), [-1, end - start, 1])
            part.stop_gradient = True
            lists[i].append(part)
        start = end
    return lists


def index_sample(x, index):
    """out[i, j] = x[i, index[i, j]]: each row of ``x`` gathered at its own indices."""
    check_variable("index_sample", "x", x)
    check_variable("index_sample", "index", index)
    helper = LayerHelper("index_sample", None)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("index_sample", {"X": x, "Index": index}, {"Out": out})
    return out
