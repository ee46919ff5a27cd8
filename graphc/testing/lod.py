"""Test helpers for LoD values: NumPy references that work on the ragged sequences directly
(never on graphc's padded buffers) and a finite-difference gradient check with LoD feeds."""

from __future__ import annotations

import numpy as np

from ..runtime.lod import LoDTensor, create_lod_tensor, pack_feed


def split(tokens: np.ndarray, lengths) -> list[np.ndarray]:
    """The sequences of packed ``tokens``."""
    ends = np.cumsum([0, *lengths])
    return [tokens[a:b] for a, b in zip(ends[:-1], ends[1:])]


def pool_reference(tokens: np.ndarray, lengths, pooltype: str, pad_value: float = 0.0):
    """sequence_pool of one level, sequence by sequence."""
    out = []
    for seq in split(tokens, lengths):
        if len(seq) == 0:
            out.append(np.full(tokens.shape[1:], pad_value, tokens.dtype))
            continue
        out.append({"SUM": lambda s: s.sum(0), "AVERAGE": lambda s: s.mean(0),
                    "SQRT": lambda s: s.sum(0) / np.sqrt(len(s)), "MAX": lambda s: s.max(0),
                    "FIRST": lambda s: s[0], "LAST": lambda s: s[-1]}[pooltype](seq))
    return np.stack(out).astype(tokens.dtype) if out else \
        np.zeros((0, *tokens.shape[1:]), tokens.dtype)


def as_feed(program, name: str, value):
    """A feed value as the step receives it: LoDTensors packed as the executor packs them."""
    var = program.global_block().var(name)
    if isinstance(value, LoDTensor):
        return pack_feed(name, value, var.type, var.dtype)
    return np.asarray(value)


def lod_grad_check(program, loss, feeds: dict, wrt: list[str], rng, eps=1e-6,
                   rtol=1e-5, atol=1e-6, coords: int = 6, state: dict | None = None) -> dict:
    """append_backward(loss), then compare the analytic gradient of each LoD feed in ``wrt``
    (over its tokens) with central differences of the loss, on the interpreter (``state``:
    parameter values by name): ``lod_checks.fd_check`` for LoD feeds.
    Returns {name: analytic token gradient}."""
    from .lod_checks import fd_check  # it imports this module
    return fd_check(program, loss, feeds, wrt, rng, state=state, eps=eps, rtol=rtol,
                    atol=atol, coords=coords)


def lod_lengths(level: int = 1, max_sequences: int = 5, max_length: int = 5):
    """A hypothesis strategy for recursive sequence lengths of ``level`` 1 or 2, empty
    sequences and length 1 included (what the LoD tests draw from)."""
    from hypothesis import strategies as st

    outer = st.lists(st.integers(0, max_length if level == 1 else 3), min_size=1,
                     max_size=max_sequences)
    if level == 1:
        return outer.map(lambda lens: [lens])
    return outer.flatmap(lambda lens: st.lists(st.integers(0, max_length), min_size=sum(lens),
                                               max_size=sum(lens)).map(lambda inner:
                                                                       [lens, inner]))


def random_lod_tensor(rng, lengths, feature_shape=(), dtype="float64", low=None, high=None):
    """A LoDTensor with ``lengths`` and random tokens: normal floats, or ints in [low, high)."""
    shape = (int(sum(lengths[-1])), *feature_shape)
    data = rng.integers(low, high, shape) if low is not None else rng.standard_normal(shape)
    return create_lod_tensor(np.asarray(data).astype(dtype), lengths)
