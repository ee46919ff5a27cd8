"""JAX's threefry2x32 random keys, hashed by straight-line code: the same bits as
``jax.random.key`` keys, without the ``while`` loop that JAX's CPU lowering rolls each hash into."""

# Why: on CPU, JAX lowers every threefry hash to a 5-trip ``while`` loop (a compile-time
# saving), and XLA cannot fuse across a loop: each random op then writes and reads its whole
# counter arrays five times, in kernels of their own, and a dropout's key derivation is a
# second loop. Written out (20 rounds of add, rotate, xor), the hash fuses into the op that
# uses the bits (a dropout's mask), as JAX's own GPU lowering does. Seeds, ``fold_in``,
# ``split`` and ``random_bits`` follow JAX's threefry implementation (its partitionable
# variant, JAX's default), so every draw equals the one from a ``jax.random.key`` of the
# same seed, bit for bit (tests/test_random_keys.py compares them); where JAX is configured
# otherwise (``jax_threefry_partitionable`` off, another default PRNG) ``key`` falls back to
# JAX's own.

from __future__ import annotations

import contextlib
import math
from contextvars import ContextVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.random import define_prng_impl

__all__ = ["GRAPHC_THREEFRY", "key", "shared_key", "shared_keys", "straight_line_supported"]

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def _hash(k1, k2, x1, x2):
    """Threefry-2x32 with 20 rounds (Salmon et al.), as JAX's unrolled lowering orders it."""
    u32 = jnp.uint32
    ks = (k1, k2, k1 ^ k2 ^ u32(_PARITY))
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x1 = x1 + x2
            x2 = lax.shift_left(x2, jnp.full_like(x2, r)) | lax.shift_right_logical(
                x2, jnp.full_like(x2, 32 - r))
            x2 = x1 ^ x2
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + u32(i + 1)
    return x1, x2


def _u32(x):
    return jnp.asarray(x).astype(jnp.uint32)


def _seed(seed):
    """The key of an integer seed: its high and low 32 bits (JAX's ``threefry_seed``)."""
    seed = jnp.asarray(seed)
    if seed.dtype.itemsize == 8:
        high = lax.shift_right_logical(seed, jnp.asarray(32, seed.dtype))
    else:  # a 32-bit seed: JAX's shift by the full width gives 0
        high = jnp.zeros_like(seed)
    return jnp.stack([_u32(high), _u32(seed & jnp.asarray(0xFFFFFFFF, seed.dtype)
                                       if seed.dtype.itemsize == 8 else seed)])


def _counts(shape):
    """Every element's flat index as (high, low) 32-bit words (JAX's ``iota_2x32_shape``)."""
    n = math.prod(shape)
    if n >= 2 ** 32:
        raise NotImplementedError(f"a random draw of {n} elements (at most 2**32 - 1)")
    low = lax.iota(jnp.uint32, n).reshape(shape)
    return jnp.zeros_like(low), low


def _split(key, shape):
    b1, b2 = _hash(key[0], key[1], *_counts(tuple(shape)))
    return jnp.stack([b1, b2], axis=b1.ndim)


def _fold_in(key, data):
    # JAX: threefry_2x32(key, threefry_seed(uint32(data))), its 2-word count split in halves
    high, low = _seed(_u32(data))
    b1, b2 = _hash(key[0], key[1], high, low)
    return jnp.stack([b1, b2])


def _random_bits(key, bit_width, shape):
    if bit_width not in (8, 16, 32, 64):
        raise TypeError(f"random bits of width {bit_width} (8, 16, 32 or 64)")
    b1, b2 = _hash(key[0], key[1], *_counts(tuple(shape)))
    dtype = {8: jnp.uint8, 16: jnp.uint16, 32: jnp.uint32, 64: jnp.uint64}[bit_width]
    if bit_width == 64:
        return lax.shift_left(b1.astype(dtype), jnp.asarray(32, dtype)) | b2.astype(dtype)
    return (b1 ^ b2).astype(dtype)


GRAPHC_THREEFRY = define_prng_impl(key_shape=(2,), seed=_seed, split=_split,
                                   random_bits=_random_bits, fold_in=_fold_in,
                                   name="threefry2x32_straight", tag="gfry")


def straight_line_supported() -> bool:
    """Whether JAX's configuration makes its default keys the ones this module reproduces."""
    return bool(jax.config.jax_threefry_partitionable) and \
        jax.config.jax_default_prng_impl == "threefry2x32"


def key(seed):
    """``jax.random.key(seed)``'s key, drawn from by straight-line threefry where JAX's
    configuration allows it (else JAX's own key)."""
    if not straight_line_supported():
        return jax.random.key(seed)
    return jax.random.wrap_key_data(jax.random.key_data(jax.random.key(seed)),
                                    impl=GRAPHC_THREEFRY)


# -- one hash for the keys of every random op of a step --------------------------------------
# (step, {seed: key data}) of the innermost ``shared_keys`` block: the keys of a walk's random
# ops, made by one vectorised hash instead of one per op. Held for the block only (its arrays
# may be tracers of the trace that made them); unset outside one.
_SHARED: ContextVar = ContextVar("graphc_shared_keys", default=None)


@contextlib.contextmanager
def shared_keys(seeds, step):
    """Within the block, ``shared_key(seed, step)`` for each of ``seeds`` at this very
    ``step`` (compared by identity) is ``fold_in(key(seed), step)``, the same key, computed
    for all seeds at once. An enclosing block that already holds them is reused. Only
    while tracing (``step`` a tracer): eagerly, one op at a time, there is nothing to share."""
    seeds = sorted(set(seeds))
    outer = _SHARED.get()
    if not isinstance(step, jax.core.Tracer) or len(seeds) < 2 or (
            outer is not None and outer[0] is step and outer[1].keys() >= set(seeds)):
        yield
        return
    data = jax.vmap(lambda s: jax.random.key_data(jax.random.fold_in(key(s), step)))(
        jnp.asarray(seeds, jnp.int64 if jax.config.jax_enable_x64 else jnp.int32))
    token = _SHARED.set((step, {s: data[i] for i, s in enumerate(seeds)}))
    try:
        yield
    finally:
        _SHARED.reset(token)


def shared_key(seed: int, step):
    """The key of ``seed`` at ``step`` from the enclosing ``shared_keys`` block, or None."""
    table = _SHARED.get()
    if table is None or table[0] is not step or seed not in table[1]:
        return None
    impl = GRAPHC_THREEFRY if straight_line_supported() else None
    return jax.random.wrap_key_data(table[1][seed], impl=impl)
