"""Many initialisers' values at once: every uniform_random (or gaussian_random) op of a
startup program drawn by one compiled function, whatever their shapes; fill_constant on the host.

Each op draws from its own key (``random_key(seed, step)``, as its rule does) and JAX's
threefry bits of element ``i`` of a draw depend only on the key and ``i`` (JAX's
partitionable threefry, on by default since JAX 0.5): so all ops' elements lie in one flat
vector, each with its op's key and its index within the op, hashed by one ``threefry2x32``
and turned into floats exactly as ``jax.random.uniform`` / ``normal`` and the rules do.
The compiled function depends only on the op kind, the output dtype and the padded element
and op counts (powers of two), so one compile serves every model of a similar size; the
result equals the rules' one by one (tests compare bit for bit).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.random import threefry2x32_p

from ..backends.lowering import apply_rule, random_key

__all__ = ["RANDOM_INITIALISERS", "draw_random", "fill_constants", "flat_draws_supported"]

RANDOM_INITIALISERS = frozenset({"uniform_random", "gaussian_random"})
_FLOATS = ("float16", "bfloat16", "float32", "float64")


def flat_draws_supported() -> bool:
    """The flat draw reproduces JAX's partitionable threefry bits only."""
    return bool(jax.config.jax_threefry_partitionable) and \
        jax.config.jax_default_prng_impl == "threefry2x32"


def _bucket(n: int, least: int) -> int:
    """``n`` rounded up to a size with 3 significant bits (at least ``least``): few distinct
    compiled sizes, and at most 1/4 of a draw is padding."""
    n = max(n, least)
    step = 1 << max(0, n.bit_length() - 3)
    return -(-n // step) * step


def _one_to_two(bits):
    """``jax.random.uniform``'s float32 in [1, 2) from 32 random bits (its mantissa)."""
    float_bits = lax.shift_right_logical(bits, jnp.array(32 - 23, jnp.uint32))
    float_bits = lax.bitwise_or(float_bits, jnp.asarray(np.array(1.0, np.float32)
                                                        .view(np.uint32), jnp.uint32))
    return lax.bitcast_convert_type(float_bits, jnp.float32)


def _flat(kinds: tuple[str, ...], dtype: str, n_pad: int):
    """jitted ``(seeds[G], step, offsets[G], op[n_pad], a[G], b[G], gauss[G], shift[G],
    c[G]) -> dtype[n_pad]``: element i belongs to op ``op[i]`` (made on the host: a search on the
    device costs as much as the draw), whose values start at ``offsets[op[i]]`` (uniform:
    a=min, b=max; gaussian (``gauss[g]``): a=mean, b=sqrt(2)*std). ``kinds``: the op types
    present."""

    def fn(seeds, step, offsets, op, a, b, gauss, shift, c):
        keys = jax.vmap(lambda s: jax.random.key_data(random_key(s, step)))(seeds)
        index = (lax.iota(jnp.int32, n_pad) - offsets[op]).astype(jnp.uint32)
        k = keys[op]
        bits1, bits2 = threefry2x32_p.bind(k[:, 0], k[:, 1], jnp.zeros_like(index), index)
        one = _one_to_two(bits1 ^ bits2)
        unit = one - jnp.float32(1.0)
        a, b = a[op], b[op]
        out = None
        if "uniform_random" in kinds:  # jax.random.uniform's max(min, u * (max - min) + min)
            # ... where a compiled rule with max - min == 1 has become one + (min - 1): XLA
            # drops the "* 1" and adds the two constants (c[g] = min - 1 in float32).
            out = lax.max(a, jnp.where(shift[op], one + c[op], unit * (b - a) + a))
        if "gaussian_random" in kinds:
            # jax.random.normal: sqrt(2) * erf_inv(U(nextafter(-1, 0), 1)); then * std + mean
            lo = jnp.asarray(np.nextafter(np.float32(-1.0), np.float32(0.0), dtype=np.float32))
            u = lax.max(lo, unit * (jnp.float32(1.0) - lo) + lo)
            normal = lax.erf_inv(u) * b + a
            out = normal if out is None else jnp.where(gauss[op], normal, out)
        return out.astype(dtype)

    return jax.jit(fn)


# cache: the jitted flat draw per (kinds, dtype, padded size); pure functions of the key
_FLAT: dict[tuple, object] = {}


def draw_random(dtype: str, ops: list[tuple[str, int, tuple, dict]], step) -> list:
    """The values of random initialisers of one output dtype, as host arrays: ``ops`` holds
    (op type, seed, shape, attrs) per op, ``seed`` the one its rule's key uses."""
    sizes = [math.prod(shape) for _, _, shape, _ in ops]
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    total = int(starts[-1])
    if total > 2 ** 30:  # int32 element indices (the caller draws in chunks)
        raise ValueError("too many elements for one flat draw")
    g_pad, n_pad = _bucket(len(ops), 8), _bucket(total, 1024)
    seeds = np.zeros(g_pad, np.int64)
    seeds[:len(ops)] = [s for _, s, _, _ in ops]
    offsets = np.full(g_pad, n_pad, np.int32)
    offsets[:len(ops)] = starts[:-1]
    counts = np.diff(starts)
    counts[-1] += n_pad - total  # the padding draws on as the last op (and is dropped)
    op = np.repeat(np.arange(len(ops), dtype=np.int32), counts)
    a, b = np.zeros(g_pad, np.float32), np.ones(g_pad, np.float32)
    gauss, shift = np.zeros(g_pad, bool), np.zeros(g_pad, bool)
    c = np.zeros(g_pad, np.float32)
    sqrt2 = np.float32(np.sqrt(2))
    # The rules pass Python floats, which JAX rounds to float32 as NumPy does.
    for i, (kind, _, _, attrs) in enumerate(ops):
        if kind == "uniform_random":
            a[i], b[i] = np.float32(attrs["min"]), np.float32(attrs["max"])
            if b[i] - a[i] == np.float32(1.0):
                shift[i], c[i] = True, a[i] - np.float32(1.0)
        else:
            # In a compiled rule std is a constant, and XLA folds normal's sqrt(2) *
            # erf_inv(u) * std into erf_inv(u) * (sqrt(2) * std): the same product here.
            a[i], b[i], gauss[i] = np.float32(attrs["mean"]), sqrt2 * np.float32(attrs["std"]), 1
    kinds = tuple(sorted({kind for kind, _, _, _ in ops}))
    key = (kinds, dtype, n_pad)
    fn = _FLAT.get(key)
    if fn is None:
        fn = _FLAT[key] = _flat(kinds, dtype, n_pad)
    flat = np.asarray(fn(seeds, step, offsets, op, a, b, gauss, shift, c))
    return [flat[starts[i]:starts[i + 1]].reshape(shape)
            for i, (_, _, shape, _) in enumerate(ops)]


def fill_constants(attrs: dict, out_type, count: int) -> list:
    """``count`` host arrays of one fill_constant's value (its rule computes the scalar, so
    the conversion to the dtype is the rule's own)."""
    scalar = apply_rule("fill_constant", {**attrs, "shape": []}, {},
                        {"Out": [out_type._replace(shape=())]}, "fill_constant")["Out"][0]
    scalar = np.asarray(scalar)
    return [np.full(out_type.shape, scalar) for _ in range(count)]


def is_float(dtype: str) -> bool:
    return dtype in _FLOATS
