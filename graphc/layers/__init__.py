"""Fluid-style layer functions (``graphc.layers.fc`` ...), building into the default programs.

Each layer appends Paddle's ops with Paddle's names; see helper.LayerHelper.
"""

# -- issue 24: beam and mask (gather_tree, generate_mask_labels)
from .beam import gather_tree

# -- issue 26: loops and tensor arrays
from .control_flow import While, array_length, array_read, array_write, create_array, while_loop

# -- issue 24: tensor creation and manipulation
from .creation import (
    create_global_var,
    create_parameter,
    create_tensor,
    diag,
    eye,
    gaussian_random,
    gaussian_random_batch_size_like,
    is_empty,
    linspace,
    sampling_id,
    shard_index,
    uniform_random,
    unique,
    unique_with_counts,
)
from .crf import chunk_eval, crf_decoding, linear_chain_crf

# -- issue 26: decoding (Decoder, BeamSearchDecoder, dynamic_decode)
from .decode import BeamSearchDecoder, Decoder, dynamic_decode, tensor_array_to_tensor
from .decode_helpers import (
    BasicDecoder,
    DecodeHelper,
    GreedyEmbeddingHelper,
    SampleEmbeddingHelper,
    TrainingHelper,
)

# -- issue 24: distributions and Variable
from .distributions import Categorical, MultivariateNormalDiag, Normal, Uniform
from .dynamic_rnn import DynamicRNN

# -- issue 24: host callbacks (py_func, Print)
from .host import Print, py_func

# -- issue 24: api signatures: a reader helper, not a layer (no op: out of __all__)
from .io import double_buffer  # noqa: F401
from .learning_rate_scheduler import (
    cosine_decay,
    exponential_decay,
    inverse_time_decay,
    linear_lr_warmup,
    natural_exp_decay,
    noam_decay,
    piecewise_decay,
    polynomial_decay,
)
from .lod_rnn import dynamic_gru, dynamic_lstm, dynamic_lstmp, gru_unit, lstm_unit
from .logic import (
    equal,
    greater_equal,
    greater_than,
    less_equal,
    less_than,
    logical_and,
    logical_not,
    logical_or,
    logical_xor,
    not_equal,
)
from .loss import (
    accuracy,
    bpr_loss,
    cos_sim,
    cross_entropy,
    huber_loss,
    kldiv_loss,
    log_loss,
    margin_rank_loss,
    mse_loss,
    rank_loss,
    sigmoid_cross_entropy_with_logits,
    smooth_l1,
    softmax_with_cross_entropy,
    square_error_cost,
    topk,
)
from .loss_more import (  # -- issue 24: losses
    center_loss,
    ctc_greedy_decoder,
    edit_distance,
    mean_iou,
    npair_loss,
    sampled_softmax_with_cross_entropy,
    sigmoid_focal_loss,
    teacher_student_sigmoid_loss,
    warpctc,
)
from .manipulation import (
    arange,
    argmax,
    argmin,
    argsort,
    expand,
    expand_as,
    fill_constant_batch_size_like,
    flatten,
    gather,
    gather_nd,
    increment,
    one_hot,
    ones,
    ones_like,
    range,
    scatter,
    shape,
    slice,
    squeeze,
    stack,
    strided_slice,
    uniform_random_batch_size_like,
    unsqueeze,
    unstack,
    where,
    zeros,
    zeros_like,
)
from .mask_labels import generate_mask_labels  # -- issue 24: beam and mask
from .math import (
    abs,
    clip,
    clip_by_norm,
    elementwise_add,
    elementwise_div,
    elementwise_floordiv,
    elementwise_max,
    elementwise_min,
    elementwise_mod,
    elementwise_mul,
    elementwise_pow,
    elementwise_sub,
    exp,
    gelu,
    l2_normalize,
    leaky_relu,
    log,
    matmul,
    mean,
    pow,
    reduce_all,
    reduce_any,
    reduce_max,
    reduce_mean,
    reduce_min,
    reduce_prod,
    reduce_sum,
    relu,
    scale,
    sigmoid,
    sign,
    softmax,
    softsign,
    sqrt,
    square,
    tanh,
)
from .math_activation import (  # -- issue 24: math activations
    acos,
    asin,
    atan,
    brelu,
    ceil,
    cos,
    cumsum,
    elu,
    erf,
    floor,
    hard_shrink,
    hard_sigmoid,
    hard_swish,
    has_inf,
    has_nan,
    isfinite,
    logsigmoid,
    maxout,
    mul,
    prelu,
    rank,
    reciprocal,
    relu6,
    round,
    rsqrt,
    selu,
    sin,
    size,
    soft_relu,
    softplus,
    softshrink,
    stanh,
    sum,
    swish,
    tanh_shrink,
    thresholded_relu,
)
from .math_op_patch import monkey_patch_variable
from .metric_op import auc
from .nn import batch_norm, conv2d, dropout, embedding, fc, layer_norm, pool2d
from .nn_extra import (  # -- issue 24: losses
    add_position_encoding,
    affine_grid,
    fsp_matrix,
    grid_sampler,
    hsigmoid,
    nce,
    random_crop,
    row_conv,
    similarity_focus,
)

# -- issue 24: nn layers (conv/pool 3-D and transposed, norms, resize)
from .nn_misc import bilinear_tensor_product, dice_loss, temporal_shift, unfold
from .nn_more import (
    adaptive_pool2d,
    adaptive_pool3d,
    affine_channel,
    conv2d_transpose,
    conv3d,
    conv3d_transpose,
    group_norm,
    instance_norm,
    lrn,
    pool3d,
)

# -- issue 24: nn tail (data_norm, spectral_norm, inplace_abn, lstm, hash, cvm, counter)
from .nn_tail import (  # noqa: A004 - hash is Paddle's layer name
    autoincreased_step_counter,
    continuous_value_model,
    data_norm,
    filter_by_instag,
    hash,
    inplace_abn,
    load,
    lstm,
    spectral_norm,
)
from .reshuffle import (
    crop,
    crop_tensor,
    label_smooth,
    multiplex,
    pad,
    pad2d,
    pad_constant_like,
    pixel_shuffle,
    reverse,
    scatter_nd,
    scatter_nd_add,
    shuffle_channel,
    space_to_depth,
)
from .resize import (
    image_resize,
    image_resize_short,
    resize_bilinear,
    resize_nearest,
    resize_trilinear,
)
from .sequence import (
    sequence_concat,
    sequence_conv,
    sequence_enumerate,
    sequence_expand,
    sequence_expand_as,
    sequence_first_step,
    sequence_last_step,
    sequence_mask,
    sequence_pad,
    sequence_pool,
    sequence_reshape,
    sequence_reverse,
    sequence_scatter,
    sequence_slice,
    sequence_softmax,
    sequence_unpad,
)
from .tensor import (
    assign,
    cast,
    concat,
    data,
    fill_constant,
    get_tensor_from_selected_rows,
    merge_selected_rows,
    reshape,
    split,
    sums,
    transpose,
)

monkey_patch_variable()

__all__ = [
    "DynamicRNN", "abs", "accuracy", "arange", "argmax", "argmin", "argsort", "assign", "auc",
    "batch_norm",
    "bpr_loss", "cast", "chunk_eval", "clip", "clip_by_norm", "concat", "conv2d", "cos_sim",
    "cosine_decay", "crf_decoding", "cross_entropy", "data", "dropout", "dynamic_gru",
    "dynamic_lstm", "dynamic_lstmp",
    "elementwise_add", "elementwise_div", "elementwise_floordiv", "elementwise_max",
    "elementwise_min", "elementwise_mod", "elementwise_mul", "elementwise_pow", "elementwise_sub",
    "embedding", "equal", "exp", "expand", "expand_as", "exponential_decay", "fc", "fill_constant",
    "fill_constant_batch_size_like", "flatten", "gather", "gather_nd", "gelu",
    "get_tensor_from_selected_rows", "greater_equal", "greater_than", "gru_unit", "huber_loss",
    "increment", "inverse_time_decay", "kldiv_loss", "l2_normalize", "layer_norm", "leaky_relu",
    "less_equal", "less_than", "linear_chain_crf", "linear_lr_warmup", "log", "log_loss",
    "logical_and", "logical_not",
    "logical_or", "logical_xor", "lstm_unit", "margin_rank_loss", "matmul", "mean",
    "merge_selected_rows", "mse_loss", "natural_exp_decay", "noam_decay", "not_equal", "one_hot",
    "ones", "ones_like", "piecewise_decay", "polynomial_decay", "pool2d", "pow", "range",
    "rank_loss", "reduce_all", "reduce_any", "reduce_max", "reduce_mean", "reduce_min",
    "reduce_prod", "reduce_sum", "relu", "reshape", "scale", "scatter", "sequence_concat",
    "sequence_conv", "sequence_enumerate", "sequence_expand", "sequence_expand_as",
    "sequence_first_step", "sequence_last_step", "sequence_mask", "sequence_pad", "sequence_pool",
    "sequence_reshape", "sequence_reverse", "sequence_scatter", "sequence_slice",
    "sequence_softmax", "sequence_unpad", "shape", "sigmoid", "sigmoid_cross_entropy_with_logits",
    "sign", "slice", "smooth_l1", "softmax", "softmax_with_cross_entropy", "softsign", "split",
    "sqrt", "square", "square_error_cost", "squeeze", "stack", "strided_slice", "sums", "tanh",
    "topk", "transpose", "uniform_random_batch_size_like", "unsqueeze", "unstack", "where",
    "zeros", "zeros_like",
    # -- issue 24: tensor creation and manipulation
    "create_global_var", "create_parameter", "create_tensor", "crop", "crop_tensor", "diag",
    "eye", "gaussian_random", "gaussian_random_batch_size_like", "is_empty", "label_smooth",
    "linspace", "multiplex", "pad", "pad2d", "pad_constant_like", "pixel_shuffle", "reverse",
    "sampling_id", "scatter_nd", "scatter_nd_add", "shard_index", "shuffle_channel",
    "space_to_depth", "uniform_random", "unique", "unique_with_counts",
    # -- issue 24: nn layers (conv/pool 3-D and transposed, norms, resize)
    "adaptive_pool2d", "adaptive_pool3d", "affine_channel", "conv2d_transpose", "conv3d",
    "conv3d_transpose", "group_norm", "image_resize", "image_resize_short", "instance_norm",
    "lrn", "pool3d", "resize_bilinear", "resize_nearest", "resize_trilinear",
    "bilinear_tensor_product", "dice_loss", "temporal_shift", "unfold",
]

# -- issue 24: nn tail (data_norm, spectral_norm, inplace_abn, lstm, hash, cvm, counter)
__all__ += ["autoincreased_step_counter", "continuous_value_model", "data_norm",
            "filter_by_instag", "hash", "inplace_abn", "load", "lstm", "spectral_norm"]

# -- issue 24: distributions and Variable
__all__ += ["Categorical", "MultivariateNormalDiag", "Normal", "Uniform"]

# -- issue 24: math activations
__all__ += [
    "acos",
    "asin",
    "atan",
    "brelu",
    "ceil",
    "cos",
    "cumsum",
    "elu",
    "erf",
    "floor",
    "hard_shrink",
    "hard_sigmoid",
    "hard_swish",
    "has_inf",
    "has_nan",
    "isfinite",
    "logsigmoid",
    "maxout",
    "mul",
    "prelu",
    "rank",
    "reciprocal",
    "relu6",
    "round",
    "rsqrt",
    "selu",
    "sin",
    "size",
    "soft_relu",
    "softplus",
    "softshrink",
    "stanh",
    "sum",
    "swish",
    "tanh_shrink",
    "thresholded_relu",
]
# -- end issue 24: math activations

# -- issue 24: losses
__all__ += [
    "center_loss",
    "ctc_greedy_decoder",
    "edit_distance",
    "mean_iou",
    "npair_loss",
    "sampled_softmax_with_cross_entropy",
    "sigmoid_focal_loss",
    "teacher_student_sigmoid_loss",
    "warpctc",
    "add_position_encoding",
    "affine_grid",
    "fsp_matrix",
    "grid_sampler",
    "hsigmoid",
    "nce",
    "random_crop",
    "row_conv",
    "similarity_focus",
]
# -- end issue 24: losses


# -- issue 24: detection
from .detection import (  # noqa: E402
    anchor_generator,
    bipartite_match,
    box_clip,
    box_coder,
    box_decoder_and_assign,
    density_prior_box,
    detection_output,
    iou_similarity,
    multiclass_nms,
    polygon_box_transform,
    prior_box,
    roi_align,
    roi_pool,
    target_assign,
    yolo_box,
)

__all__ += ["anchor_generator", "bipartite_match", "box_clip", "box_coder",
            "box_decoder_and_assign", "density_prior_box", "detection_output",
            "iou_similarity", "multiclass_nms",
            "polygon_box_transform", "prior_box", "roi_align", "roi_pool", "target_assign",
            "yolo_box"]
# -- end issue 24: detection

# -- issue 24: vision sampling
from .vision_sampling import (  # noqa: E402
    deformable_conv,
    deformable_roi_pooling,
    im2sequence,
    prroi_pool,
    psroi_pool,
    roi_perspective_transform,
)

__all__ += ["deformable_conv", "deformable_roi_pooling", "im2sequence", "prroi_pool",
            "psroi_pool", "roi_perspective_transform"]
# -- end issue 24: vision sampling


# -- issue 24: detection proposals
from .detection_proposals import (  # noqa: E402
    collect_fpn_proposals,
    distribute_fpn_proposals,
    generate_proposal_labels,
    generate_proposals,
    locality_aware_nms,
    multiclass_nms2,
    retinanet_detection_output,
)

__all__ += ["collect_fpn_proposals", "distribute_fpn_proposals", "generate_proposal_labels",
            "generate_proposals", "locality_aware_nms", "multiclass_nms2",
            "retinanet_detection_output"]
# -- end issue 24: detection proposals


# -- issue 24: detection targets
from .detection_targets import (  # noqa: E402
    multi_box_head,
    retinanet_target_assign,
    rpn_target_assign,
    ssd_loss,
    yolov3_loss,
)

__all__ += ["multi_box_head", "retinanet_target_assign", "rpn_target_assign", "ssd_loss",
            "yolov3_loss"]
# -- end issue 24: detection targets


# -- issue 26: LoD ops of control-flow programs (lod_reset, rank tables, beam_search)
from .lod_control import (  # noqa: E402
    beam_search,
    beam_search_decode,
    lod_append,
    lod_rank_table,
    lod_reset,
    max_sequence_len,
    reorder_lod_tensor_by_rank,
)

__all__ += ["beam_search", "beam_search_decode", "lod_append", "lod_rank_table", "lod_reset",
            "max_sequence_len", "reorder_lod_tensor_by_rank"]
# -- end issue 26: LoD ops of control-flow programs


# -- ifelse26: split_lod_tensor / merge_lod_tensor (Paddle's IfElse building blocks)
from .lod_split import merge_lod_tensor, split_lod_tensor  # noqa: E402

__all__ += ["merge_lod_tensor", "split_lod_tensor"]
# -- end ifelse26


# -- arr2lod: lod_tensor_to_array / array_to_lod_tensor / shrink_memory (DynamicRNN's parts)
from .lod_array import array_to_lod_tensor, lod_tensor_to_array, shrink_memory  # noqa: E402

__all__ += ["array_to_lod_tensor", "lod_tensor_to_array", "shrink_memory"]
# -- end arr2lod

def __getattr__(name: str):
    # a Fluid layer graphc lacks: a graphc error with advice (still an AttributeError)
    from ..fluid._missing import missing
    raise missing("graphc.fluid.layers", name)

# -- issue 24: host callbacks (py_func, Print)
__all__ += ["Print", "py_func"]

# -- issue 24: beam and mask (gather_tree, generate_mask_labels)
__all__ += ["gather_tree", "generate_mask_labels"]
# -- issue 26: loops and tensor arrays
__all__ += ["While", "array_length", "array_read", "array_write", "create_array", "while_loop"]



# -- issue 26: StaticRNN and the RNN-cell API (RNNCell, GRUCell, LSTMCell, rnn)
from .rnn_cells import GRUCell, LSTMCell, RNNCell, rnn  # noqa: E402
from .static_rnn import StaticRNN  # noqa: E402

__all__ += ["GRUCell", "LSTMCell", "RNNCell", "StaticRNN", "rnn"]
# -- end issue 26: StaticRNN and the RNN-cell API


# -- issue 26: conditionals (cond, case, switch_case, ConditionalBlock, Switch, IfElse)
from .conditional import case, cond, switch_case  # noqa: E402
from .ifelse import IfElse  # noqa: E402
from .switch import ConditionalBlock, Switch  # noqa: E402

__all__ += ["ConditionalBlock", "IfElse", "Switch", "case", "cond", "switch_case"]


# -- issue 26: decoding (Decoder, BeamSearchDecoder, dynamic_decode)
__all__ += ["BeamSearchDecoder", "Decoder", "dynamic_decode", "tensor_array_to_tensor",
            "BasicDecoder", "DecodeHelper", "GreedyEmbeddingHelper", "SampleEmbeddingHelper",
            "TrainingHelper"]
