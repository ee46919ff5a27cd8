"""LoD fix-ups shared by several op families: a row-wise op's last word on its LoD outputs
(``register(..., lod_fixup=...)``, docs/lod.md), refusing what would cross or reorder tokens.

Each takes (attrs, the input types (their LoD levels too), {slot: LoD level}, outputs with
LoD attached) and returns the outputs, or raises ShapeError saying which sequence-aware op to
use instead.
"""

from __future__ import annotations

import math

from .errors import ShapeError
from .shapes import normalize_axis


def last_axis_only(attrs, ins, levels, out):
    """softmax and friends normalise along an axis: never along the tokens."""
    x = next(t for ts in ins.values() for t in ts)
    axis = attrs.get("axis", -1)
    if x.rank and normalize_axis(axis, x.rank) == 0:
        raise ShapeError("axis 0 of a LoD value runs across the tokens of every sequence; "
                         "use sequence_softmax, or an axis after the token dimension")
    return out


def reduce_lod(attrs, ins, levels, out):
    """Reducing the token dimension (dim 0, or all) sums every token: a dense result, exact
    because padding rows hold zeros. Other dimensions keep the LoD."""
    x = ins["X"][0]
    dims = set(range(x.rank)) if attrs["reduce_all"] else {
        normalize_axis(d, x.rank, "dim") for d in attrs["dim"]}
    if 0 in dims:
        return {k: [t.with_lod(0) for t in v] for k, v in out.items()}
    return out


def keeps_token_rows(attrs, ins, levels, out):
    """A shape op on a LoD value must leave dim 0 the tokens, each row whole."""
    x, y = ins["X"][0], out["Out"][0]
    rest_x, rest_y = x.shape[1:], y.shape[1:]
    if not (y.rank and y.shape[0] == x.shape[0] and all(d >= 0 for d in rest_x + rest_y)
            and math.prod(rest_x) == math.prod(rest_y)):
        raise ShapeError(f"reshaping the LoD value {x} to {list(y.shape)} does not keep one "
                         "row per token (dim 0 must stay the tokens and each token's "
                         f"{math.prod(d for d in rest_x if d >= 0)} values together)")
    return out


def not_along_tokens(attrs, ins, levels, out):
    """concat puts features side by side; along axis 0 it stacks whole batches, which only
    LoD values of one level can do (the second's sequences after the first's: ELMo's
    ``concat([loss_fw, loss_bw])``). A dense value there would mix rows with tokens."""
    rank = out["Out"][0].rank
    if not rank or normalize_axis(attrs.get("axis", 0), rank) != 0:
        return out
    xs = ins["X"]
    if any(t.lod_level != xs[0].lod_level for t in xs):
        raise ShapeError(f"concatenating {', '.join(map(str, xs))} along axis 0 mixes a "
                         "dense value or another LoD level with LoD sequences; concatenate "
                         "LoD values of one level (their sequences one batch after the "
                         "other), use sequence_concat, or an axis after the token dimension")
    return out
