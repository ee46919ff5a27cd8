"""append_backward (a loss's parameter gradients) and gradients (any targets' gradients
with respect to any inputs): gradient ops added to the program, Paddle style.

Grad ops come from each op's grad maker; a value read by several ops gets its gradient
contributions under ``@RENAME@`` names, summed before use. Linear in program size. An
``is_sparse`` embedding's table gets a row-sparse (SelectedRows) gradient.
"""

from __future__ import annotations

from ..ir.errors import ArgumentTypeError, ProgramError
from ..ir.grad_defs import DOUBLE_GRAD_OPS, GRAD_SUFFIX, forward_type, is_differentiable
from ..ir.graph import gc_paused
from ..ir.opdef import get_op_def
from ..ir.program import Parameter, Variable
from ..ir.types import FLOAT_DTYPES


def _names(items) -> set[str]:
    return {getattr(i, "name", i) for i in (items or ())}


@gc_paused
def append_backward(loss: Variable, parameter_list=None, no_grad_set=None,
                    callbacks=None, checkpoints=None) -> list[tuple[Parameter, Variable]]:
    """Append grad ops for ``loss``; return [(parameter, its gradient variable)].

    ``checkpoints`` (Paddle's recompute segments) are checked and recorded on the program
    (``program._recompute_checkpoints``); the grad ops are the same, since the step compiles
    to one XLA program whose scheduler decides what to keep or recompute."""
    if not isinstance(loss, Variable):
        raise ProgramError(f"append_backward: loss must be a Variable, got {type(loss).__name__}")
    block = loss.block
    if loss.shape is None or any(d < 0 for d in loss.shape):
        raise ProgramError(f"append_backward: loss '{loss.name}' must have a known shape, got "
                           f"{loss.shape}; reduce it with layers.mean first")
    if loss.dtype not in FLOAT_DTYPES:
        raise ProgramError(f"append_backward: loss '{loss.name}' must be floating point")
    if checkpoints is not None:
        block.program._recompute_checkpoints = _checkpoint_names(block, checkpoints)
    if parameter_list is not None:
        # checked before any op is appended, as Paddle 1.8 checks it (a TypeError)
        if not isinstance(parameter_list, list | tuple | set):
            raise ArgumentTypeError("append_backward: parameter_list must be a list of "
                                    f"parameters or names, got {type(parameter_list).__name__}")
        bad = [p for p in parameter_list if not isinstance(p, str | Variable)]
        if bad:
            raise ArgumentTypeError("append_backward: parameter_list holds a "
                                    f"{type(bad[0]).__name__} ({bad[0]!r:.40}); give "
                                    "parameters or their names")
    no_grad = _names(no_grad_set)
    finalize = _backward(block, [loss], None, no_grad, callbacks)
    params = block.all_parameters() if parameter_list is None else [
        block.var(getattr(p, "name", p)) for p in parameter_list]
    result = []
    for p in params:
        if not isinstance(p, Parameter) or not p.trainable or p.name in no_grad:
            continue
        g = finalize(p.name)
        if g is not None:
            result.append((p, block.var(g)))
    return result


def _checkpoint_names(block, checkpoints) -> list[str]:
    if not isinstance(checkpoints, list | tuple):
        raise ProgramError(f"append_backward: checkpoints must be a list of Variables, got "
                           f"{type(checkpoints).__name__}")
    names = []
    for c in checkpoints:
        name = getattr(c, "name", c)
        if not isinstance(name, str) or not block.has_var(name):
            raise ProgramError(f"append_backward: checkpoint {c!r} is not a variable of the "
                               "loss's program")
        names.append(name)
    return names


@gc_paused
def gradients(targets, inputs, target_gradients=None, no_grad_set=None) -> list:
    """Paddle's fluid.gradients: the gradients of sum(targets * target_gradients) (ones when
    not given) with respect to each of ``inputs``, as a list (None where an input does not
    reach a target or has stop_gradient=True). A target computed from gradients is
    differentiated through their grad ops (second derivatives, grad_defs.DOUBLE_GRAD_OPS)."""
    targets = list(targets) if isinstance(targets, list | tuple) else [targets]
    inputs = list(inputs) if isinstance(inputs, list | tuple) else [inputs]
    for v in [*targets, *inputs]:
        if not isinstance(v, Variable):
            raise ProgramError(f"gradients: targets and inputs must be Variables, got {v!r}")
    if target_gradients is not None:
        target_gradients = list(target_gradients) if isinstance(
            target_gradients, list | tuple) else [target_gradients]
        if len(target_gradients) != len(targets):
            raise ProgramError(f"gradients: {len(target_gradients)} target_gradients for "
                               f"{len(targets)} targets")
        for t, g in zip(targets, target_gradients):
            if g is not None and t.shape is not None and g.shape is not None \
                    and list(g.shape) != list(t.shape):
                raise ProgramError(f"gradients: target_gradient '{g.name}' has shape "
                                   f"{list(g.shape)}, target '{t.name}' {list(t.shape)}")
    block = targets[0].block
    for t in targets:
        if t.dtype not in FLOAT_DTYPES:
            raise ProgramError(f"gradients: target '{t.name}' must be floating point")
    finalize = _backward(block, targets, target_gradients or [None] * len(targets),
                         _names(no_grad_set), None, roots=[v.name for v in inputs],
                         suffix=_free_suffix(block))
    out = []
    for v in inputs:
        g = finalize(v.name)
        out.append(block.var(g) if g is not None else None)
    return out


def _free_suffix(block) -> str:
    """``@GRAD``, or ``@GRAD@G<k>`` when gradients were already built in ``block``: a second
    gradients() call must not overwrite the first one's values."""
    names = list(block.vars)
    if not any(GRAD_SUFFIX in n for n in names):
        return GRAD_SUFFIX
    k = 0
    while any(f"{GRAD_SUFFIX}@G{k}" in n for n in names):
        k += 1
    return f"{GRAD_SUFFIX}@G{k}"


def _backward(block, targets, seeds, no_grad, callbacks, roots=(), suffix=GRAD_SUFFIX):
    """Append the grad ops of ``targets`` (``seeds``: each one's given output gradient, None:
    ones; ``seeds`` None: append_backward's single loss, seeded ``loss@GRAD`` = 1); returns
    ``finalize(name)`` -> the name of name's complete gradient, or None. Gradients are named
    ``<value><suffix>`` (``@GRAD``; gradients() picks another where that is taken)."""
    program = block.program
    ops = block.ops
    target_names = {t.name for t in targets}
    loss_idx = max((i for i, op in enumerate(ops) if target_names & set(op.output_arg_names)),
                   default=None)
    if loss_idx is None:
        raise ProgramError(f"append_backward: no op computes '{targets[0].name}'")
    # backward-role ops too: a target computed from gradients (fluid.gradients of a gradient,
    # a gradient penalty) is differentiated through their grad ops (T_grad_grad)
    forward = [op for op in ops[:loss_idx + 1] if op.role in ("forward", "backward")]

    known: dict[str, bool] = {}  # asked several times per variable

    def differentiable(name: str) -> bool:
        answer = known.get(name)
        if answer is None:
            var = block.var(name)
            answer = known[name] = (not var.stop_gradient and var.dtype in FLOAT_DTYPES
                                    and name not in no_grad)
        return answer

    # Forward reachability: values that depend on something trainable.
    depends = {v.name for v in block.vars.values()
               if v.name not in no_grad and not v.stop_gradient and v.dtype in FLOAT_DTYPES
               and (v.persistable or v.is_data)}
    depends.update(n for n in roots if differentiable(n))
    # as in Paddle, a value a non-differentiable op makes (fill_constant) and the user marked
    # stop_gradient=False is a leaf that takes a gradient too (creation layers mark theirs True)
    depends.update(n for op in forward if op.role == "forward" and not is_differentiable(
        op.type) for n in op.output_arg_names if differentiable(n))
    for op in forward:
        # a gradient op without a second derivative passes the dependence on too, so that
        # the path below reaches it and refuses it by name
        if (is_differentiable(op.type) or forward_type(op.type) is not None) and any(
                n in depends for n in op.input_arg_names):
            depends.update(n for n in op.output_arg_names if differentiable(n))
    # Backward reachability: ops on a path from something trainable to the loss.
    needed, path = set(target_names), []
    for op in reversed(forward):
        if not any(n in needed for n in op.output_arg_names):
            continue
        if not is_differentiable(op.type):
            _refuse_second_gradient(op, needed, depends, differentiable)
            continue
        diff_inputs = [n for n in op.input_arg_names if n in depends and differentiable(n)]
        if diff_inputs:
            path.append(op)
            needed.update(diff_inputs)

    writers: dict[str, int] = {}
    for op in forward:
        for n in op.output_arg_names:
            # a fed value an op overwrites (a loop carrying a feed) holds two values
            writers[n] = writers.get(n, 1 if block.var(n).is_data else 0) + 1
    pos = {id(op): i for i, op in enumerate(forward)}
    overwritten = _overwritten_feeds(block, forward, path, writers, needed, depends,
                                     differentiable)
    contributions: dict[str, int] = {}  # by _version_key: a rewritten feed counts per value
    for op in path:
        for n in op.input_arg_names:
            if n in needed and n in depends and differentiable(n):
                if writers.get(n, 0) > 1 and n not in overwritten:
                    raise ProgramError(
                        f"append_backward: '{n}' is written {writers[n]} times and lies on the "
                        f"gradient path ({op.where}); in-place rewrites of differentiable "
                        "values are not supported")
                key = _version_key(n, pos[id(op)], overwritten)
                contributions[key] = contributions.get(key, 0) + 1

    grad_of: dict[str, str] = {}  # forward name -> its complete gradient's name
    pending: dict[str, list[str]] = {}  # forward name -> contributions not yet summed

    sparse_grads: set[str] = set()  # gradients that are row-sparse (is_sparse lookups' tables)
    # rewritten feeds whose writer the reverse sweep has passed: their gradient from here on
    # is the fed value's, named ``<name>@GRAD``; before, the rewritten value's (``@AFTER``)
    passed: set[str] = set()

    def reach_fed_value(name: str) -> None:
        if name not in passed:
            passed.add(name)
            grad_of.pop(name, None)
            pending.pop(name, None)  # the rewritten value's parts its writer did not take

    def grad_var(name: str, grad_name: str, sparse: bool = False) -> str:
        var = block.var(name)
        # a LoD value's gradient has its LoD (docs/lod.md)
        grad = block.create_var(grad_name, var.shape, var.dtype, lod_level=var.lod_level)
        grad.selected_rows = sparse
        grad.is_array, grad.element_lod = var.is_array, var.element_lod  # arr2lod: LoD steps
        if sparse:
            sparse_grads.add(grad_name)
        return grad_name

    def finalize(name: str) -> str | None:
        parts = pending.pop(name, None)
        if parts:
            if len(parts) == 1:
                grad_of[name] = parts[0]
            else:
                # typed by inference: the sum of row-sparse parts is row-sparse (a table
                # shared by sparse lookups), of mixed ones dense
                full = block.create_var(name + suffix + ("@AFTER" if name in overwritten and
                                                         name not in passed else ""),
                                        dtype=block.var(name).dtype).name
                block.append_op("sum", {"X": parts}, {"Out": full}, source=source)
                if block.var(full).selected_rows:
                    sparse_grads.add(full)
                grad_of[name] = full
        return grad_of.get(name)

    def unused_name(base: str) -> str:
        k = 0
        while block.has_var(f"{base}@{k}"):
            k += 1
        return f"{base}@{k}"

    def zero_grad(op, name: str) -> str:
        """Zeros for an output whose gradient is unused but whose siblings' are not."""
        zero = grad_var(name, name + suffix)
        block.append_op("fill_zeros_like", {"X": name}, {"Out": zero}, source=op.source)
        grad_of[name] = zero
        return zero

    with program.op_role_guard("backward"):
        source = ops[loss_idx].source
        if seeds is None:
            loss = targets[0]
            loss_grad = grad_var(loss.name, loss.name + GRAD_SUFFIX)
            block.append_op("fill_constant", outputs={"Out": loss_grad},
                            attrs={"shape": list(loss.shape), "dtype": loss.dtype,
                                   "value": 1.0}, source=source)
            grad_of[loss.name] = loss_grad
        else:
            for t, given in zip(targets, seeds):
                _seed(block, t, given, grad_var, source, pending, suffix)
                key = _version_key(t.name, len(forward), overwritten)
                contributions[key] = contributions.get(key, 0) + 1
        for op in path:  # already in reverse order
            source = op.source
            out_grads = {s: [finalize(n) for n in names] for s, names in op.outputs.items()}
            if not any(g for gs in out_grads.values() for g in gs):
                continue
            for slot, gs in out_grads.items():  # a duplicable output (split) only partly used
                if None in gs and any(gs):
                    out_grads[slot] = [g or zero_grad(op, n) for n, g in zip(op.outputs[slot], gs)]
            in_grads = {}
            sparse_slot, sparse_attr = get_op_def(op.type).sparse_grad or (None, None)
            for slot, names in op.inputs.items():
                gs = []
                sparse = slot == sparse_slot and bool(op.attrs.get(sparse_attr))
                for n in names:
                    if n in needed and n in depends and differentiable(n):
                        key = _version_key(n, pos[id(op)], overwritten)
                        if n in overwritten and key == n:
                            reach_fed_value(n)
                        base = n + suffix + ("" if key == n else "@AFTER")
                        k = len(pending.get(n, ()))
                        gname = base if contributions[key] == 1 else f"{base}@RENAME@{k}"
                        pending.setdefault(n, []).append(grad_var(n, gname, sparse))
                        gs.append(gname)
                    else:
                        gs.append(None)
                if None in gs and any(gs):  # a duplicable input (concat, sum) partly needed
                    gs = [g or grad_var(n, unused_name(n + suffix + "@EMPTY"))
                          for n, g in zip(names, gs)]
                in_grads[slot] = gs
            maker = get_op_def(op.type).grad_maker
            # a row-sparse output gradient (the table of a sparse lookup that is itself
            # computed) is checked: the grad op must take it, or the user hears why not
            sparse_in = bool(sparse_grads) and any(g in sparse_grads for gs in out_grads.values()
                                                   for g in gs)
            append = block._append_trusted if getattr(maker, "trusted", False) \
                and not sparse_in else block.append_op
            for gtype, gins, gouts, gattrs in maker(op.inputs, op.outputs, op.attrs,
                                                    out_grads, in_grads):
                append(gtype, gins, gouts, gattrs, source=op.source)
            for n in op.output_arg_names:
                if overwritten.get(n) == pos[id(op)]:
                    reach_fed_value(n)
            if callbacks:
                for cb in callbacks:
                    cb(block, op)
        # Leaves other than parameters (data with stop_gradient=False) read by several ops
        # still need their contributions summed into ``name@GRAD``.
        for name in list(overwritten):
            reach_fed_value(name)  # its writer was not on the path: nothing reached the feed
        for name in list(pending):
            finalize(name)
    return finalize


def _refuse_second_gradient(op, needed, depends, differentiable) -> None:
    """A gradient op with no gradient of its own on a second gradient's path: say which op
    (Paddle 1.8 has no double-grad op for it either) rather than return a silent None."""
    if forward_type(op.type) is None:
        return  # an ordinary op without a gradient (fill_constant, a comparison)
    if any(n in depends and differentiable(n) for n in op.input_arg_names):
        raise ProgramError(
            f"gradients: the target depends on a gradient computed by {op.type} ({op.where}), "
            f"which has no second derivative in graphc (Paddle 1.8 has no "
            f"{op.type}_grad op for it); ops with one: {', '.join(sorted(DOUBLE_GRAD_OPS))}")


def _overwritten_feeds(block, forward, path, writers, needed, depends, differentiable):
    """Fed variables one op overwrites (a loop carrying a feed), by that op's forward index.
    Backward names the fed value's gradient ``<name>@GRAD``, as Paddle does: allowed where
    no grad op of an earlier reader needs the fed value itself (only copies read it), since
    grad ops read variables by name and the name then holds the rewritten value."""
    out: dict[str, int] = {}
    for name, count in writers.items():
        if count != 2 or not block.var(name).is_data or name not in needed \
                or name not in depends or not differentiable(name):
            continue
        at = next(i for i, op in enumerate(forward) if name in op.output_arg_names)
        early = [op for op in path if name in op.input_arg_names
                 and forward.index(op) <= at and op.type != "assign"]
        if early:
            raise ProgramError(
                f"append_backward: fed variable '{name}' is overwritten by an op and lies "
                f"on the gradient path ({early[0].where}), whose gradient needs the fed value "
                f"the later write replaces: differentiate a copy instead (layers.assign({name})"
                " as the loop variable)")
        out[name] = at
    return out


def _version_key(name: str, index: int, overwritten) -> str:
    """The value of ``name`` an op at forward ``index`` reads: a rewritten feed's later value
    counts its gradient parts apart from the fed one's."""
    at = overwritten.get(name)
    return name if at is None or index <= at else name + "\0after"


def _seed(block, target, given, grad_var, source, pending, suffix) -> None:
    """``target``'s output gradient for gradients(): ``given``, else ones of its shape (of
    its run-time shape where a dimension is unknown)."""
    name = grad_var(target.name, f"{target.name}{suffix}@SEED")
    if given is not None:
        block.append_op("assign", {"X": given}, {"Out": name}, source=source)
    elif target.shape is not None and all(d >= 0 for d in target.shape):
        block.append_op("fill_constant", outputs={"Out": name},
                        attrs={"shape": list(target.shape), "dtype": target.dtype,
                               "value": 1.0}, source=source)
    else:
        zeros = grad_var(target.name, f"{target.name}{suffix}@ZEROS")
        block.append_op("fill_zeros_like", {"X": target}, {"Out": zeros}, source=source)
        block.append_op("scale", {"X": zeros}, {"Out": name}, {"scale": 1.0, "bias": 1.0},
                        source=source)
    pending.setdefault(target.name, []).append(name)
