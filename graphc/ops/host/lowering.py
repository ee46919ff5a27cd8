"""Host op rules: ``py_func`` is ``jax.pure_callback`` (``jax.debug.callback`` without outputs),
``print`` is ``jax.debug.callback`` in Paddle's TensorFormatter layout; gradients likewise."""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np

from ...backends.lod import LoDArray
from ...backends.lowering import LoweringError, lowering
from .defs import host_callables

# Paddle's DataTypeToString names, which its Print writes after "dtype:"
_PADDLE_DTYPE = {"float32": "float", "float64": "double", "int32": "int", "int64": "int64_t",
                 "float16": "float16", "bool": "bool", "uint8": "uint8_t", "int8": "int8_t",
                 "int16": "int16_t"}


def _as_list(result) -> list:
    if result is None:
        return []
    return list(result) if isinstance(result, list | tuple) else [result]


def _out_structs(c, X) -> list[jax.ShapeDtypeStruct]:
    """The outputs' shapes: declared ones; a leading -1 (a batch dimension) is the first
    input's leading dimension, the only size the step can know before the call."""
    structs = []
    for t in c.out_types.get("Out", []):
        shape = list(t.shape)
        if shape and shape[0] < 0 and X:
            shape[0] = X[0].shape[0]
        if any(d < 0 for d in shape):
            raise LoweringError(f"{c.where}: py_func output shape {list(t.shape)} has an "
                                "unknown dimension other than the leading one; give its "
                                "size in create_var")
        structs.append(jax.ShapeDtypeStruct(tuple(shape), jnp.dtype(t.dtype)))
    return structs


def _checked(results, structs, what: str) -> tuple:
    """A host function's results checked against and cast to ``structs``."""
    results = _as_list(results)
    if len(results) != len(structs):
        raise ValueError(f"{what} returned {len(results)} values for {len(structs)} outputs")
    out = []
    for r, s in zip(results, structs):
        a = np.asarray(r)
        if a.size != int(np.prod(s.shape, dtype=np.int64)):
            raise ValueError(f"{what} returned shape {list(a.shape)} for an output of shape "
                             f"{list(s.shape)}")
        out.append(a.reshape(s.shape).astype(s.dtype))
    return tuple(out)


@lowering("py_func")
def _py_func(c, X):
    fn = host_callables().get(c["forward_callable_id"])
    xs = list(X or [])
    structs = _out_structs(c, xs)
    if not structs:  # a function run for its effect (Paddle's py_func with out=None)
        jax.debug.callback(lambda *a: fn(*[np.asarray(v) for v in a]), *xs)
        return {}
    def forward(*arrays):
        return _checked(fn(*[np.asarray(a) for a in arrays]), structs, "py_func's func")

    outs = jax.pure_callback(forward, tuple(structs), *xs)
    return {"Out": list(outs)}


@lowering("py_func_grad")
def _py_func_grad(c, **kw):
    fn = host_callables().get(c["backward_callable_id"])
    xs, outs = list(kw.get("X") or []), list(kw.get("Out") or [])
    douts = [g if g is not None else jnp.zeros_like(o)
             for g, o in zip(kw.get("Out@GRAD") or [None] * len(outs), outs)]
    skip_x, skip_out = set(c["backward_skip_x"]), set(c["backward_skip_out"])
    args = ([x for i, x in enumerate(xs) if i not in skip_x]
            + [o for i, o in enumerate(outs) if i not in skip_out] + douts)
    structs = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in xs]

    def backward(*arrays):
        results = _as_list(fn(*[np.asarray(a) for a in arrays]))
        # None for an input: Paddle computes no gradient for it; zeros here
        results = [np.zeros(s.shape, s.dtype) if r is None else r
                   for r, s in zip(results, structs)] + results[len(structs):]
        return _checked(results, structs, "py_func's backward_func")

    grads = jax.pure_callback(backward, tuple(structs), *args)
    return {"X@GRAD": list(grads)}


def _real_tokens(data: np.ndarray, lengths: list[np.ndarray]):
    """(the real tokens of a packed LoD value, its LoD as Paddle's offsets per level)."""
    lod, count = [], len(lengths[0])
    for level in lengths:
        used = np.asarray(level)[:count].astype(np.int64)
        lod.append([0, *np.cumsum(used).tolist()])
        count = int(used.sum())
    return data[:count], lod


def _format(c, value: np.ndarray, name: str, lod=()) -> str:
    """Paddle's TensorFormatter layout: name, message, lod, shape, dtype, then the first
    ``summarize`` values (all with -1)."""
    lines = []
    if c["print_tensor_name"]:
        lines.append(f"Variable: {name}")
    if c["message"]:
        lines.append(f"  - message: {c['message']}")
    if c["print_tensor_lod"]:
        levels = "".join("{" + ", ".join(str(i) for i in level) + "}" for level in lod)
        lines.append(f"  - lod: {{{levels}}}")
    if c["print_tensor_shape"]:
        lines.append(f"  - shape: [{', '.join(str(d) for d in value.shape)}]")
    if c["print_tensor_type"]:
        lines.append(f"  - dtype: {_PADDLE_DTYPE.get(str(value.dtype), str(value.dtype))}")
    flat = value.reshape(-1)
    n = flat.size if c["summarize"] == -1 else min(c["summarize"], flat.size)
    # C++ ostream's default (6 significant digits) for floats, as Paddle prints them
    fmt = "{:g}".format if value.dtype.kind == "f" else str
    lines.append(f"  - data: [{' '.join(fmt(v) for v in flat[:n].tolist())}]")
    return "\n".join(lines) + "\n"


def _print_on_host(c, value, name: str, phase: str) -> None:
    first_n, key = c["first_n"], c["counter_id"]
    # one count per data-parallel replica, as Paddle's per-device copies of the op count
    replica = jnp.zeros((), jnp.int32) if c.replicas is None else jnp.asarray(
        c.replicas.axis_index(), jnp.int32)

    def show(rank, data, *lengths):
        if first_n > 0 and host_callables().tick(key, f"{phase}/{int(rank)}") >= first_n:
            return
        data, lod = np.asarray(data), ()
        if lengths:
            data, lod = _real_tokens(data, list(lengths))
        sys.stdout.write(_format(c, data, name, lod))
        sys.stdout.flush()

    if isinstance(value, LoDArray):
        jax.debug.callback(show, replica, value.data, *value.lengths)
    else:
        jax.debug.callback(show, replica, value)


@lowering("print")
def _print(c, In):
    if c["print_phase"] in ("forward", "both"):
        _print_on_host(c, In, c["tensor_name"], "forward")
    return {"Out": In}


@lowering("print_grad")
def _print_grad(c, **kw):
    dout = kw["Out@GRAD"]
    if c["print_phase"] in ("backward", "both"):
        _print_on_host(c, dout, c["tensor_name"] + "@GRAD", "backward")
    return {"In@GRAD": dout}
