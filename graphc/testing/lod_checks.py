"""Finite-difference gradient checks for programs mixing LoD feeds, dense feeds and
parameters (the sequence ops' tests), and the loss they differentiate.

LoD feeds are perturbed token by token on the ragged data (``graphc.testing.lod``'s way), so
padding rows never enter the check.
"""

from __future__ import annotations

import numpy as np

from .. import layers
from ..backends.interpreter import run_graph
from ..ir.graph import lower
from ..runtime.lod import LoDTensor, create_lod_tensor, unpack
from .lod import as_feed


def token_loss(out, rng, name: str = "fd_w"):
    """``reduce_sum((out^2 + out) * w)`` with ``w`` a fixed random dense weight over the
    dimensions after the first (so it broadcasts over tokens): a loss whose gradient differs
    token by token. Returns (loss, {w's name: its value}) to add to the feeds."""
    import graphc
    shape = list(out.shape[1:]) or [1]
    w_value = rng.standard_normal(shape).astype(out.dtype)
    w = graphc.data(name, shape, out.dtype)
    value = out if out.shape[1:] else layers.reshape(out, [-1, 1])
    terms = layers.elementwise_add(layers.square(value), value)
    return layers.reduce_sum(layers.elementwise_mul(terms, w)), {name: w_value}


def fd_check(program, loss, feeds: dict, wrt: list[str], rng, state: dict | None = None,
             eps=1e-6, rtol=1e-5, atol=1e-6, coords: int = 6) -> dict:
    """append_backward(loss), then compare the analytic gradient of each name in ``wrt`` (a
    LoD feed: over its tokens; a dense feed; a parameter in ``state``) with central
    differences of the loss at ``coords`` random elements, on the interpreter.
    Returns {name: analytic gradient (tokens for a LoD feed)}."""
    from ..build.backward import append_backward
    state = dict(state or {})
    forward = lower(program)
    append_backward(loss)
    full = lower(program)

    def packed(fd):
        return {k: as_feed(program, k, v) for k, v in fd.items()}

    def loss_at(fd, st):
        out = run_graph(forward, st, packed(fd), [loss.name])[1][0]
        return float(np.asarray(out).reshape(-1)[0])

    _, fetched = run_graph(full, state, packed(feeds),
                           [loss.name, *(w + "@GRAD" for w in wrt)])
    grads = {}
    for name, g in zip(wrt, fetched[1:]):
        g = np.asarray(unpack(g)) if not isinstance(g, np.ndarray) else g
        is_lod = isinstance(feeds.get(name), LoDTensor)
        value = np.array(feeds[name] if name in feeds else state[name], dtype=np.float64)
        assert g.shape == value.shape, (name, g.shape, value.shape)
        flat = value.reshape(-1)
        picks = rng.choice(flat.size, min(coords, flat.size), replace=False) if flat.size else []
        for i in picks:
            numeric = []
            for sign in (1, -1):
                moved = flat.copy()
                moved[i] += sign * eps
                moved = moved.reshape(value.shape).astype(np.array(feeds.get(name, state.get(
                    name))).dtype)
                if is_lod:
                    fd = {**feeds, name: create_lod_tensor(
                        moved, feeds[name].recursive_sequence_lengths())}
                    numeric.append(loss_at(fd, state))
                elif name in feeds:
                    numeric.append(loss_at({**feeds, name: moved}, state))
                else:
                    numeric.append(loss_at(feeds, {**state, name: moved}))
            slope = (numeric[0] - numeric[1]) / (2 * eps)
            np.testing.assert_allclose(g.reshape(-1)[i], slope, rtol=rtol, atol=atol,
                                       err_msg=f"d loss / d {name} at element {i}")
        grads[name] = g
    return grads
