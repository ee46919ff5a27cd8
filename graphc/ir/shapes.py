"""Shape arithmetic shared by inference rules and backends: Paddle's axis broadcasting,
unknown (-1) dimensions, convolution and pooling output sizes."""

from __future__ import annotations

import math

from .errors import ShapeError


def broadcast_dim(a: int, b: int) -> int:
    if a == b:
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    if a < 0:
        return b if b != 1 else a
    if b < 0:
        return a
    raise ShapeError(f"dimensions {a} and {b} do not broadcast")


def align_for_axis(x: tuple[int, ...], y: tuple[int, ...], axis: int):
    """Pad the lower-rank shape with 1s so both align as Paddle's elementwise ops do.

    ``axis == -1`` aligns trailing dimensions (numpy); otherwise the smaller operand starts
    at dimension ``axis`` of the larger one (fc bias: axis=1 on [N, 10] + [10]).
    """
    big, small, swapped = (x, y, False) if len(x) >= len(y) else (y, x, True)
    if axis == -1 or axis is None:
        axis = len(big) - len(small)
    if axis < 0:
        axis += len(big)
    # Paddle trims trailing size-1 dims of the smaller operand before checking the axis.
    trimmed = list(small)
    while len(trimmed) + axis > len(big) and trimmed and trimmed[-1] == 1:
        trimmed.pop()
    if axis < 0 or axis + len(trimmed) > len(big):
        raise ShapeError(f"axis {axis} does not fit shapes {list(x)} and {list(y)}")
    padded = (1,) * axis + tuple(trimmed) + (1,) * (len(big) - axis - len(trimmed))
    return (padded, big) if swapped else (big, padded)


def broadcast_shapes(x: tuple[int, ...], y: tuple[int, ...], axis: int = -1) -> tuple[int, ...]:
    xa, ya = align_for_axis(x, y, axis)
    try:
        return tuple(broadcast_dim(a, b) for a, b in zip(xa, ya))
    except ShapeError:
        raise ShapeError(
            f"shapes {list(x)} and {list(y)} do not broadcast (axis={axis})") from None


def prod_or_unknown(dims) -> int:
    dims = list(dims)
    return -1 if any(d < 0 for d in dims) else math.prod(dims)


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < max(rank, 1):
        raise ShapeError(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def conv_pads(paddings: list[int]) -> list[int]:
    """Paddle paddings: [p] or [ph, pw] (symmetric) or [top, bottom, left, right]."""
    if len(paddings) == 1:
        return paddings * 4
    if len(paddings) == 2:
        return [paddings[0], paddings[0], paddings[1], paddings[1]]
    if len(paddings) == 4:
        return list(paddings)
    raise ShapeError(f"paddings must have 1, 2 or 4 entries, got {paddings}")


def same_pads(size: int, k: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """Padding before/after for padding_algorithm='SAME' (TensorFlow's rule, as Paddle)."""
    if size < 0:
        return 0, 0
    out = -(-size // stride)
    total = max((out - 1) * stride + dilation * (k - 1) + 1 - size, 0)
    return total // 2, total - total // 2


def resolve_pads(algo: str, paddings: list[int], hw, ksize, strides, dilations=(1, 1)
                 ) -> list[tuple[int, int]]:
    """(before, after) padding of H and W under Paddle's padding_algorithm."""
    pads = conv_pads(paddings)
    out = []
    for i in range(2):
        if algo == "SAME":
            out.append(same_pads(hw[i], ksize[i], strides[i], dilations[i]))
        elif algo == "VALID":
            out.append((0, 0))
        else:
            out.append((pads[2 * i], pads[2 * i + 1]))
    return out


def window_out(size: int, k: int, stride: int, pad_lo: int, pad_hi: int,
               dilation: int = 1, ceil_mode: bool = False) -> int:
    if size < 0:
        return -1
    eff = dilation * (k - 1) + 1
    span = size + pad_lo + pad_hi - eff
    if span < 0:
        raise ShapeError(f"window {eff} larger than padded input {size + pad_lo + pad_hi}")
    return (span + stride - 1) // stride + 1 if ceil_mode else span // stride + 1


def shard_shape(shape, nranks: int) -> tuple[int, int]:
    """The ``[1, c]`` piece each of ``nranks`` replicas holds of a tensor of ``shape``."""
    if any(d < 0 for d in shape):
        raise ValueError(f"cannot shard a tensor of unknown shape {list(shape)}")
    return (1, -(-math.prod(shape) // nranks))
