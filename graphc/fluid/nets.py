"""``fluid.nets``: Paddle 1.8's composite blocks (conv + pool, VGG-style conv groups, GLU,
scaled dot-product attention) built from graphc's layers with Paddle's arguments and defaults."""

from __future__ import annotations

from .. import layers
from ..ir.errors import ProgramError
from ._missing import missing
from .core import LoDError

__all__ = ["glu", "img_conv_group", "scaled_dot_product_attention", "sequence_conv_pool",
           "simple_img_conv_pool"]


def simple_img_conv_pool(input, num_filters, filter_size, pool_size, pool_stride,
                         pool_padding=0, pool_type="max", global_pooling=False, conv_stride=1,
                         conv_padding=0, conv_dilation=1, conv_groups=1, param_attr=None,
                         bias_attr=None, act=None, use_cudnn=True):
    """conv2d (with bias and ``act``) followed by pool2d."""
    conv = layers.conv2d(input, num_filters, filter_size, stride=conv_stride,
                         padding=conv_padding, dilation=conv_dilation, groups=conv_groups,
                         param_attr=param_attr, bias_attr=bias_attr, use_cudnn=use_cudnn, act=act)
    return layers.pool2d(conv, pool_size=pool_size, pool_type=pool_type, pool_stride=pool_stride,
                         pool_padding=pool_padding, global_pooling=global_pooling,
                         use_cudnn=use_cudnn)


def img_conv_group(input, conv_num_filter, pool_size, conv_padding=1, conv_filter_size=3,
                   conv_act=None, param_attr=None, conv_with_batchnorm=False,
                   conv_batchnorm_drop_rate=0.0, pool_stride=1, pool_type="max",
                   use_cudnn=True):
    """A VGG block: one conv2d per entry of ``conv_num_filter`` (each optionally followed by
    batch_norm carrying the activation, then dropout when its rate is non-zero), then one
    pool2d. Per-conv arguments are a single value or a list as long as ``conv_num_filter``."""
    if not isinstance(conv_num_filter, list | tuple):
        raise ProgramError("img_conv_group: conv_num_filter must be a list of filter counts, "
                           f"got {conv_num_filter!r}")
    n = len(conv_num_filter)

    def per_conv(value, what):
        if not isinstance(value, list | tuple):
            return [value] * n
        if len(value) != n:
            raise ProgramError(f"img_conv_group: {what} has {len(value)} entries for {n} convs")
        return list(value)

    paddings = per_conv(conv_padding, "conv_padding")
    sizes = per_conv(conv_filter_size, "conv_filter_size")
    attrs = per_conv(param_attr, "param_attr")
    with_bn = per_conv(conv_with_batchnorm, "conv_with_batchnorm")
    drop_rates = per_conv(conv_batchnorm_drop_rate, "conv_batchnorm_drop_rate")
    out = input
    for i in range(n):
        # with batch norm the activation follows the normalisation, not the conv
        out = layers.conv2d(out, conv_num_filter[i], sizes[i], padding=paddings[i],
                            param_attr=attrs[i], act=None if with_bn[i] else conv_act,
                            use_cudnn=use_cudnn)
        if with_bn[i]:
            out = layers.batch_norm(out, act=conv_act)
            if abs(drop_rates[i]) > 1e-5:
                out = layers.dropout(out, dropout_prob=drop_rates[i])
    return layers.pool2d(out, pool_size=pool_size, pool_type=pool_type, pool_stride=pool_stride,
                         use_cudnn=use_cudnn)


def glu(input, dim=-1):
    """Gated linear unit: split ``input`` in two halves along ``dim``, a * sigmoid(b)."""
    a, b = layers.split(input, num_or_sections=2, dim=dim)
    return layers.elementwise_mul(a, layers.sigmoid(b))


def scaled_dot_product_attention(queries, keys, values, num_heads=1, dropout_rate=0.0):
    """softmax(Q K^T / sqrt(d)) V over [batch, length, width] inputs. With ``num_heads`` > 1,
    Q, K and V first go through their own fc (no activation) and are split into heads,
    whose results are joined back to [batch, length, width]."""
    for what, x in (("queries", queries), ("keys", keys), ("values", values)):
        if x.ndim != 3:
            raise ProgramError(f"scaled_dot_product_attention: {what} '{x.name}' must be 3-D "
                               f"[batch, length, width], got shape {list(x.shape)}")
    if queries.shape[-1] != keys.shape[-1]:
        raise ProgramError("scaled_dot_product_attention: queries and keys need the same "
                           f"width, got {list(queries.shape)} and {list(keys.shape)}")
    if keys.shape[-2] != values.shape[-2]:
        raise ProgramError("scaled_dot_product_attention: keys and values need the same "
                           f"length, got {list(keys.shape)} and {list(values.shape)}")
    if keys.shape[-1] % num_heads or values.shape[-1] % num_heads:
        raise ProgramError(f"scaled_dot_product_attention: num_heads={num_heads} must divide "
                           f"the key width {keys.shape[-1]} and value width {values.shape[-1]}")
    q, k, v = queries, keys, values
    if num_heads > 1:
        q = layers.fc(q, q.shape[-1], num_flatten_dims=2)
        k = layers.fc(k, k.shape[-1], num_flatten_dims=2)
        v = layers.fc(v, v.shape[-1], num_flatten_dims=2)

        def split_heads(x):
            width = x.shape[-1]
            x = layers.reshape(x, [0, 0, num_heads, width // num_heads])
            return layers.transpose(x, [0, 2, 1, 3])

        q, k, v = split_heads(q), split_heads(k), split_heads(v)
    scaled_q = layers.scale(q, scale=(keys.shape[-1] // num_heads) ** -0.5)
    weights = layers.softmax(layers.matmul(scaled_q, k, transpose_y=True))
    if dropout_rate:
        weights = layers.dropout(weights, dropout_prob=dropout_rate, is_test=False)
    context = layers.matmul(weights, v)
    if num_heads > 1:
        context = layers.transpose(context, [0, 2, 1, 3])
        context = layers.reshape(context, [0, 0, context.shape[2] * context.shape[3]])
    return context


def sequence_conv_pool(input, num_filters, filter_size, param_attr=None, act="sigmoid",
                       pool_type="max", bias_attr=None):
    """sequence_conv (bias and ``act``) over a LoD ``input``, then sequence_pool of each
    sequence (``pool_type``): one dense row per sequence."""
    if getattr(input, "lod_level", 0) != 1:
        raise LoDError(f"nets.sequence_conv_pool: input {getattr(input, 'name', input)!r} must "
                       "be a LoD value of lod_level 1 (variable-length sequences, e.g. "
                       "layers.data(..., lod_level=1)); see docs/lod.md")
    conv = layers.sequence_conv(input, num_filters, filter_size, param_attr=param_attr,
                                bias_attr=bias_attr, act=act)
    return layers.sequence_pool(conv, pool_type)


def __getattr__(name: str):
    raise missing(__name__, name)
