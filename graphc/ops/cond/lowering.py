"""Lowering of cond / case / switch_case (lax.cond / lax.switch when traced, a Python branch in
the interpreter) and ifelse (both branches on every row, each row selected); their gradients
are the vjp of these rules, so only the taken branch (or row) receives one."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from ...backends.lowering import RuleContext, get_rule, lowering
from ...ir.errors import ShapeError
from ...ir.grad_defs import GRAD_SUFFIX, forward_type
from ...ir.opdef import get_op_def
from ...ir.types import FLOAT_DTYPES, TensorType
from ..scan.defs import body_graph


def _branch(c, text: str):
    """The branch graph as a function of the op's inputs, its outputs in the op's dtypes."""
    from ...backends.evaluate import evaluate  # evaluate imports the rules package
    body = body_graph(text)
    ops = body.ops()
    types = c.out_types["Out"]

    def run(*ins):
        env = dict(zip(body.inputs, ins))
        evaluate(body, env, c.step, c.replicas, ops=ops)
        outs = [env[v] for v in body.outputs]
        # lax.cond/switch want identical types from every branch: the op's dtypes
        return tuple(o if t.array else lax.convert_element_type(jnp.asarray(o), t.dtype)
                     for o, t in zip(outs, types))
    return run


def _traced(*values) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(values))


def _shapes(fn, ins):
    return [tuple(o.shape) for o in jax.tree_util.tree_leaves(jax.eval_shape(fn, *ins))]


def select_branch(c, index, texts: list[str], ins: list) -> dict:
    """Run ``texts[index]`` on ``ins``: lax.switch when traced (one program holding every
    branch), else only that branch. Branches whose run-time shapes differ are refused."""
    fns = [_branch(c, t) for t in texts]
    ins = tuple(ins)
    if _traced(index, ins):
        try:
            outs = lax.switch(jnp.asarray(index, jnp.int32).reshape(()), fns, *ins)
        except TypeError as exc:
            raise ShapeError(f"{c.where}: the branches return different types when run: "
                             f"{exc}") from None
        return {"Out": list(outs)}
    # the interpreter runs one branch, but refuses what the traced step would refuse
    shapes = [_shapes(fn, ins) for fn in fns]
    for i, s in enumerate(shapes[1:], 1):
        if s != shapes[0]:
            raise ShapeError(f"{c.where}: branch {i} returns shapes {s} but branch 0 "
                             f"{shapes[0]} when run: every branch must return the same shapes")
    return {"Out": list(fns[int(index)](*ins))}


@lowering("cond")
def _cond(c, Cond, Input):
    # branch 0 is the false body: the bool's integer value picks the branch
    index = jnp.asarray(Cond).reshape(()).astype(jnp.int32)
    return select_branch(c, index, [c["false_body"], c["true_body"]], Input)


def _first_true(flags: list):
    """The index of the first true flag, len(flags) when none is."""
    stacked = jnp.stack([jnp.asarray(f).reshape(()).astype(bool) for f in flags]
                        + [jnp.asarray(True)])
    return jnp.argmax(stacked).astype(jnp.int32)


@lowering("case")
def _case(c, Conds, Input):
    return select_branch(c, _first_true(Conds), c["branches"], Input)


@lowering("switch_case")
def _switch_case(c, Index, Input):
    value = jnp.asarray(Index).reshape(()).astype(jnp.int64)  # a uint8 index meets int keys
    index = _first_true([value == k for k in c["keys"]]) if c["keys"] else jnp.int32(0)
    return select_branch(c, index, c["branches"], Input)


def _own_rows(mask):
    """Row indices that keep the rows a branch owns and put a copy of its first owned row in
    place of the others, so a branch never computes on another branch's rows (no NaN from a
    log of the other branch's values reaches its gradient)."""
    rows = jnp.arange(mask.shape[0])
    return jnp.where(mask, rows, jnp.argmax(mask))


def _rows_branch(fn, own, xs: list, consts: list):
    """``fn`` on the rows; a branch owning no row does not run (zeros of its outputs'
    shapes stand in, all of them masked out), so it cannot compute on rows it never owns."""
    ins = (*xs, *consts)

    def skip(*_):
        return tuple(jnp.zeros(s.shape, s.dtype) for s in jax.eval_shape(fn, *ins))

    if _traced(own, ins):
        return lax.cond(jnp.any(own), fn, skip, *ins)
    return fn(*ins) if bool(jnp.any(own)) else skip()


@lowering("ifelse")
def _ifelse(c, Cond, X, Input):
    mask = jnp.asarray(Cond).reshape(-1).astype(bool)
    n = mask.shape[0]
    outs = []
    for own, text in ((mask, c["true_body"]), (~mask, c["false_body"])):
        idx = _own_rows(own)
        outs.append(_rows_branch(_branch(c, text), own, [x[idx] for x in X], list(Input)))
    merged = []
    for k, (t, f) in enumerate(zip(*outs)):
        if t.shape[:1] != (n,) or f.shape[:1] != (n,):
            raise ShapeError(f"{c.where}: output {k} has {t.shape[:1]} / {f.shape[:1]} rows in "
                             f"the true / false branch, but Cond has {n} rows")
        merged.append(jnp.where(mask.reshape((n,) + (1,) * (t.ndim - 1)), t, f))
    return {"Out": merged}


def _type_of(v) -> TensorType:
    return TensorType(tuple(v.shape), str(v.dtype))


@lowering("cond_grad", "case_grad", "switch_case_grad", "ifelse_grad")
def _region_grad(c, **kw):
    """The vjp of the forward rule over the floating inputs; integer and bool inputs (a
    carried counter) get zero gradients, integer outputs (an index) pass no cotangent."""
    fwd_type = forward_type(c.op_type)
    fwd = get_op_def(fwd_type)
    rule = get_rule(fwd_type)
    inputs = {s.name: kw.get(s.name) for s in fwd.inputs}
    in_types = {s: [_type_of(a) for a in (v if isinstance(v, list) else [v])]
                for s, v in inputs.items() if v is not None and not (isinstance(v, list) and not v)}
    out_types = fwd.infer_types(in_types, c.attrs, c.where)
    ctx = RuleContext(fwd_type, c.attrs, out_types, c.where, c.seed_key, c.step, c.replicas)
    wanted = [s[: -len(GRAD_SUFFIX)] for s in c.out_types]
    picks = [(s, i) for s in wanted for i, a in enumerate(inputs[s])
             if jnp.issubdtype(a.dtype, jnp.inexact)]
    floats = [k for k, t in enumerate(out_types["Out"]) if t.dtype in FLOAT_DTYPES]

    def forward(*diff):
        ins = {s: list(v) if isinstance(v, list) else v for s, v in inputs.items()}
        for (s, i), a in zip(picks, diff):
            ins[s][i] = a
        out = rule(ctx, **ins)["Out"]
        return tuple(out[k] for k in floats)

    outs, vjp = jax.vjp(forward, *[inputs[s][i] for s, i in picks])
    given = kw.get("Out" + GRAD_SUFFIX) or []
    cot = tuple(jnp.zeros_like(o) if k >= len(given) or given[k] is None
                else jnp.asarray(given[k]).astype(o.dtype).reshape(o.shape)
                for k, o in zip(floats, outs))
    grads = dict(zip(picks, vjp(cot)))
    return {s + GRAD_SUFFIX: [grads.get((s, i), jnp.zeros_like(a))
                              for i, a in enumerate(inputs[s])] for s in wanted}
