"""Paddle 1.8's ``fluid.layers.<module>`` submodules (nn, tensor, control_flow, ...): one table of
each module's public names, resolved to graphc.layers' layers when a ported script asks for them."""

from __future__ import annotations

import dis
import importlib
import importlib.util
import sys
import types

from ._missing import MissingAPIError, MissingModuleError, missing

# Paddle 1.8's python/paddle/fluid/layers/<module>.py ``__all__`` (1.8 moved the losses to
# loss.py, the sequence layers to sequence_lod.py and the LSTM/GRU/beam layers to rnn.py).
_NN = (
    "fc", "embedding", "linear_chain_crf", "crf_decoding", "cos_sim", "chunk_eval", "conv2d",
    "conv3d", "softmax", "pool2d", "pool3d", "adaptive_pool2d", "adaptive_pool3d",
    "batch_norm", "inplace_abn", "instance_norm", "data_norm", "conv2d_transpose",
    "conv3d_transpose", "reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod",
    "reduce_all", "reduce_any", "dropout", "split", "ctc_greedy_decoder", "l2_normalize",
    "matmul", "topk", "transpose", "im2sequence", "row_conv", "multiplex", "layer_norm",
    "group_norm", "spectral_norm", "smooth_l1", "one_hot", "autoincreased_step_counter",
    "reshape", "squeeze", "unsqueeze", "lod_reset", "lod_append", "lrn", "pad",
    "pad_constant_like", "label_smooth", "roi_pool", "roi_align", "dice_loss", "image_resize",
    "image_resize_short", "resize_bilinear", "resize_trilinear", "resize_nearest", "gather",
    "gather_nd", "scatter", "scatter_nd_add", "scatter_nd", "random_crop", "mean_iou", "relu",
    "selu", "log", "crop", "crop_tensor", "elu", "relu6", "pow", "stanh", "hard_sigmoid",
    "swish", "prelu", "brelu", "leaky_relu", "soft_relu", "flatten", "stack", "pad2d",
    "unstack", "unique", "unique_with_counts", "expand", "expand_as", "scale",
    "elementwise_add", "elementwise_div", "elementwise_sub", "elementwise_mul",
    "elementwise_max", "elementwise_min", "elementwise_pow", "elementwise_mod",
    "elementwise_floordiv", "uniform_random_batch_size_like", "gaussian_random", "sampling_id",
    "gaussian_random_batch_size_like", "sum", "slice", "strided_slice", "shape", "rank",
    "size", "logical_and", "logical_or", "logical_xor", "logical_not", "clip", "clip_by_norm",
    "mean", "mul", "maxout", "space_to_depth", "affine_grid", "affine_channel",
    "similarity_focus", "hash", "grid_sampler", "log_loss", "add_position_encoding",
    "bilinear_tensor_product", "merge_selected_rows", "get_tensor_from_selected_rows",
    "shuffle_channel", "temporal_shift", "py_func", "psroi_pool", "prroi_pool",
    "pixel_shuffle", "fsp_matrix", "continuous_value_model", "where", "sign", "deformable_conv",
    "unfold", "deformable_roi_pooling", "filter_by_instag", "shard_index", "hard_swish",
    "gather_tree", "uniform_random",
)
_TENSOR = (
    "create_tensor", "create_parameter", "create_global_var", "cast", "tensor_array_to_tensor",
    "concat", "sums", "assign", "fill_constant_batch_size_like", "fill_constant", "argmin",
    "argmax", "argsort", "ones", "zeros", "reverse", "has_inf", "has_nan", "isfinite", "range",
    "linspace", "zeros_like", "ones_like", "diag", "eye",
)
_CONTROL_FLOW = (
    "While", "Switch", "increment", "array_write", "create_array", "less_than", "less_equal",
    "greater_than", "greater_equal", "equal", "not_equal", "array_read", "array_length",
    "cond", "IfElse", "DynamicRNN", "StaticRNN", "reorder_lod_tensor_by_rank", "Print",
    "is_empty", "case", "switch_case", "while_loop",
    "ConditionalBlock",  # -- issue 26: a class of Paddle's module, out of its __all__
    # -- issue 26: module-level helpers outside Paddle's __all__ that programs import
    "lod_rank_table", "max_sequence_len",
    "split_lod_tensor", "merge_lod_tensor",  # -- ifelse26: helpers out of __all__ as well
    # -- arr2lod: DynamicRNN's low-level helpers, out of Paddle's __all__ too
    "lod_tensor_to_array", "array_to_lod_tensor", "shrink_memory",
)
_IO = ("data", "read_file", "double_buffer", "py_reader", "create_py_reader_by_data", "load")
_LOSS = (
    "center_loss", "bpr_loss", "cross_entropy", "square_error_cost", "edit_distance",
    "warpctc", "nce", "hsigmoid", "sampled_softmax_with_cross_entropy",
    "softmax_with_cross_entropy", "rank_loss", "margin_rank_loss",
    "sigmoid_cross_entropy_with_logits", "teacher_student_sigmoid_loss", "huber_loss",
    "kldiv_loss", "npair_loss", "mse_loss",
)
_DETECTION = (
    "prior_box", "density_prior_box", "multi_box_head", "bipartite_match", "target_assign",
    "detection_output", "ssd_loss", "detection_map", "rpn_target_assign",
    "retinanet_target_assign", "sigmoid_focal_loss", "anchor_generator",
    "roi_perspective_transform", "generate_proposal_labels", "generate_proposals",
    "generate_mask_labels", "iou_similarity", "box_coder", "polygon_box_transform",
    "yolov3_loss", "yolo_box", "box_clip", "multiclass_nms", "locality_aware_nms",
    "matrix_nms", "retinanet_detection_output", "distribute_fpn_proposals",
    "box_decoder_and_assign", "collect_fpn_proposals",
)
_SEQUENCE_LOD = (
    "sequence_conv", "sequence_softmax", "sequence_pool", "sequence_concat",
    "sequence_first_step", "sequence_last_step", "sequence_slice", "sequence_expand",
    "sequence_expand_as", "sequence_pad", "sequence_unpad", "sequence_reshape",
    "sequence_scatter", "sequence_enumerate", "sequence_mask", "sequence_reverse",
)
_RNN = (
    "RNNCell", "GRUCell", "LSTMCell", "Decoder", "BeamSearchDecoder", "rnn", "dynamic_decode",
    "DecodeHelper", "TrainingHelper", "GreedyEmbeddingHelper", "SampleEmbeddingHelper",
    "BasicDecoder", "dynamic_lstm", "dynamic_lstmp", "dynamic_gru", "gru_unit", "lstm_unit",
    "lstm", "beam_search", "beam_search_decode",
)
_LR = (
    "exponential_decay", "natural_exp_decay", "inverse_time_decay", "polynomial_decay",
    "piecewise_decay", "noam_decay", "cosine_decay", "linear_lr_warmup",
)
# utils.py and math_op_patch.py have no ``__all__`` in 1.8: their public helpers
_UTILS = ("convert_to_list", "is_sequence", "flatten", "pack_sequence_as", "map_structure",
          "assert_same_structure")

# module name under fluid.layers -> (Paddle's names, where graphc keeps them): "layers" is the
# flat graphc.layers namespace; a graphc.layers.<m> module's own helpers are looked up there
PADDLE_LAYER_MODULES: dict[str, tuple[tuple[str, ...], str]] = {
    "nn": (_NN, "layers"),
    "tensor": (_TENSOR, "layers"),
    "control_flow": (_CONTROL_FLOW, "layers"),
    "io": (_IO, "layers"),
    "ops": ((), "layers"),  # graphc.layers.ops keeps Paddle's ops list and its own hook
    "loss": (_LOSS, "layers"),
    "detection": (_DETECTION, "layers"),
    "metric_op": (("accuracy", "auc"), "layers"),
    "learning_rate_scheduler": (_LR, "layers"),
    "sequence_lod": (_SEQUENCE_LOD, "layers"),
    "math_op_patch": (("monkey_patch_variable",), "own"),
    "utils": (_UTILS, "own"),
    "rnn": (_RNN, "layers"),
}

_IMPORT_FROM = dis.opmap["IMPORT_FROM"]


def _from_import(frame) -> bool:
    """Whether ``frame`` is executing ``from module import name``: CPython turns an
    AttributeError met there into a bare ImportError, dropping graphc's advice."""
    code = frame.f_code.co_code
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] == _IMPORT_FROM


def _lookup(paddle_module: str, module: types.ModuleType, name: str):
    names, where = PADDLE_LAYER_MODULES[paddle_module]
    layers = sys.modules["graphc.layers"]
    if name in names and where == "layers":
        return getattr(layers, name)  # graphc.layers' hook: advice for what graphc lacks
    own = getattr(module, "__graphc_own_getattr__", None)
    if own is not None:
        return own(name)
    raise missing(f"graphc.fluid.layers.{paddle_module}", name)


def _resolver(paddle_module: str, module: types.ModuleType):
    """The module ``__getattr__`` serving Paddle's names of ``paddle_module`` on ``module``."""

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(f"module '{module.__name__}' has no attribute '{name}'")
        try:
            return _lookup(paddle_module, module, name)
        except MissingAPIError as exc:
            if _from_import(sys._getframe(1)):
                # the advice must survive ``from ... import name``: an ImportError that is
                # not an AttributeError passes through the import statement unchanged
                raise MissingModuleError(str(exc), name=module.__name__) from None
            raise

    return __getattr__


def _graphc_module(name: str) -> types.ModuleType | None:
    real = f"graphc.layers.{name}"
    if real in sys.modules:
        return sys.modules[real]
    try:
        found = importlib.util.find_spec(real) is not None
    except ImportError:
        return None
    return importlib.import_module(real) if found else None


def _view(name: str, names: tuple[str, ...]) -> types.ModuleType:
    module = types.ModuleType(f"graphc.fluid.layers.{name}",
                              f"Paddle 1.8's fluid.layers.{name}: its names, served by "
                              "graphc.layers (graphc keeps no module of this name).")
    layers = sys.modules["graphc.layers"]
    module.__all__ = [n for n in names if n in layers.__dict__]
    return module


def install() -> None:
    """Make each Paddle ``fluid.layers.<m>`` importable and an attribute of fluid.layers:
    graphc's own module of that name gains Paddle's names; otherwise a view module stands in."""
    layers = sys.modules["graphc.layers"]
    for name, (names, _) in PADDLE_LAYER_MODULES.items():
        module = _graphc_module(name)
        if module is None:
            module = _view(name, names)
            # Paddle's ``from .rnn import *`` makes fluid.layers.rnn the rnn() layer, not the
            # module: a module named like a layer stays reachable by import only
            if not any(name in listed for listed, _ in PADDLE_LAYER_MODULES.values()):
                setattr(layers, name, module)
        elif isinstance(module.__dict__.get("__getattr__"), types.FunctionType) and \
                getattr(module.__getattr__, "__qualname__", "").startswith("_resolver"):
            continue  # installed already (graphc.fluid imported again after a reload)
        else:
            previous = module.__dict__.get("__getattr__")
            if previous is not None:
                module.__graphc_own_getattr__ = previous  # e.g. layers.ops' own hook
        module.__getattr__ = _resolver(name, module)
        sys.modules[f"graphc.fluid.layers.{name}"] = module
