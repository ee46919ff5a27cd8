"""Gradient clipping by value, by norm and by global norm (Paddle 1.8's API, ``fluid.clip``),
appended to the program as ops between backward and the optimizer."""

from __future__ import annotations

import copy
import math
import numbers
import warnings

from ..ir import unique_name
from ..ir.default_programs import default_main_program
from ..ir.errors import ProgramError
from ..ir.program import Parameter

# Clipping rewrites each gradient variable in place (``w@GRAD = clip(w@GRAD)``), as L2 decay
# does: the data-parallel pass walks back over such optimize-role ops to the gradient the
# backward pass finished and all-reduces that one, so on several devices the clip (and the
# global norm) sees the aggregated gradient, as on one device.


class GradientClipBase:
    """A clipping rule: called with [(param, grad)], appends its ops, returns the pairs.

    ``need_clip(param) -> bool`` (Paddle 1.8) leaves the parameters it rejects unclipped; so
    does ``ParamAttr(need_clip=False)``.
    """

    def __init__(self, need_clip=None):
        if need_clip is not None and not callable(need_clip):
            raise ProgramError(f"{type(self).__name__}: need_clip must be a function of the "
                               f"parameter returning True (clip) or False, got {need_clip!r}")
        self._need_clip_func = need_clip

    def _needs_clip(self, param) -> bool:
        if not getattr(param, "need_clip", True):
            return False
        return self._need_clip_func is None or bool(self._need_clip_func(param))

    def __call__(self, params_grads):
        params_grads = list(params_grads)
        chosen = [(p, g) for p, g in params_grads if g is not None and self._needs_clip(p)]
        for p, g in chosen:
            if g.selected_rows and not self._takes_sparse:
                raise ProgramError(
                    f"{type(self).__name__}: the gradient of '{p.name}' is row-sparse (an "
                    "is_sparse embedding's); graphc clips those by value or by norm only. "
                    "Build the embedding with is_sparse=False, or leave it out with need_clip")
        if chosen:
            self._clip(chosen[0][0].block, chosen)
        return params_grads

    # whether _clip's ops take a row-sparse gradient (clip and clip_by_norm merge its rows
    # first, as Paddle's SelectedRows kernels do)
    _takes_sparse = False

    def _clip(self, block, params_grads) -> None:
        raise NotImplementedError

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if k != "_need_clip_func")
        return f"{type(self).__name__}({fields})"


class GradientClipByValue(GradientClipBase):
    """Clamp every gradient element to [min, max]; ``min`` defaults to ``-max``."""

    _takes_sparse = True

    def __init__(self, max, min=None, need_clip=None):
        super().__init__(need_clip)
        max = _finite("GradientClipByValue", "max", max)
        if min is None:
            if max <= 0:
                raise ProgramError(f"GradientClipByValue: max must be > 0 when min is not "
                                   f"given, got {max}")
            min = -max
        min = _finite("GradientClipByValue", "min", min)
        if min > max:
            raise ProgramError(f"GradientClipByValue: min {min} must not exceed max {max}")
        self.max, self.min = max, min

    def _clip(self, block, params_grads) -> None:
        for _, g in params_grads:
            block.append_op("clip", {"X": g}, {"Out": g}, {"min": self.min, "max": self.max})


class GradientClipByNorm(GradientClipBase):
    """Scale each gradient down to L2 norm ``clip_norm`` when its own norm exceeds it."""

    _takes_sparse = True

    def __init__(self, clip_norm, need_clip=None):
        super().__init__(need_clip)
        self.clip_norm = _positive("GradientClipByNorm", clip_norm)

    def _clip(self, block, params_grads) -> None:
        for _, g in params_grads:
            block.append_op("clip_by_norm", {"X": g}, {"Out": g}, {"max_norm": self.clip_norm})


class GradientClipByGlobalNorm(GradientClipBase):
    """Scale all gradients by clip_norm / max(clip_norm, global_norm), where global_norm is
    the L2 norm of every clipped gradient together (Paddle's formula).

    A row-sparse gradient (an is_sparse embedding's) has its repeated rows summed first, as
    Paddle merges them: its term is the norm of the dense gradient, and the merged rows are
    scaled."""

    _takes_sparse = True

    def __init__(self, clip_norm, group_name: str = "default_group", need_clip=None):
        super().__init__(need_clip)
        if not isinstance(group_name, str):
            raise ProgramError(f"GradientClipByGlobalNorm: group_name must be a str, got "
                               f"{group_name!r}")
        self.clip_norm = _positive("GradientClipByGlobalNorm", clip_norm)
        self.group_name = group_name

    def _clip(self, block, params_grads) -> None:
        dtype = params_grads[0][1].dtype
        squares = []
        for _, g in params_grads:
            total = _tmp(block, f"{g.name}@CLIP_SUM", g.dtype)
            if g.selected_rows:  # rows merged in place, squared without densifying
                block.append_op("merge_selected_rows", {"X": g}, {"Out": g})
                block.append_op("squared_l2_norm", {"X": g}, {"Out": total})
            else:
                sq = _tmp(block, f"{g.name}@CLIP_SQUARE", g.dtype)
                block.append_op("square", {"X": g}, {"Out": sq})
                block.append_op("reduce_sum", {"X": sq}, {"Out": total}, {"reduce_all": True})
            squares.append(_cast(block, total, dtype))
        sum_sq = _tmp(block, "global_norm_square", dtype)
        block.append_op("sum", {"X": squares}, {"Out": sum_sq})
        norm = _tmp(block, "global_norm", dtype)
        block.append_op("sqrt", {"X": sum_sq}, {"Out": norm})
        limit = _tmp(block, "max_global_norm", dtype)
        block.append_op("fill_constant", outputs={"Out": limit},
                        attrs={"shape": [1], "dtype": dtype, "value": self.clip_norm})
        denominator = _tmp(block, "global_norm_clip", dtype)
        block.append_op("elementwise_max", {"X": limit, "Y": norm}, {"Out": denominator})
        scale = _tmp(block, "global_norm_scale", dtype)
        block.append_op("elementwise_div", {"X": limit, "Y": denominator}, {"Out": scale})
        for _, g in params_grads:
            block.append_op("elementwise_mul", {"X": g, "Y": _cast(block, scale, g.dtype)},
                            {"Out": g})


class ErrorClipByValue:
    """Paddle's error clipping (of activations' gradients during backward) is not in graphc."""

    def __init__(self, max, min=None):
        raise ProgramError("ErrorClipByValue is not supported by graphc: clip gradients with "
                           "GradientClipByValue / ByNorm / ByGlobalNorm (optimizer grad_clip= "
                           "or set_gradient_clip)")


def _finite(who: str, what: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ProgramError(f"{who}: {what} must be a finite number, got {value!r}")
    return float(value)


def _positive(who: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0 \
            or math.isinf(value):
        raise ProgramError(f"{who}: clip_norm must be a positive number, got {value!r}")
    return float(value)


def _tmp(block, name: str, dtype):
    return block.create_var(unique_name.generate(name), None, dtype, stop_gradient=True)


def _cast(block, var, dtype):
    if var.dtype == dtype:
        return var
    out = _tmp(block, f"{var.name}@CAST", dtype)
    block.append_op("cast", {"X": var}, {"Out": out},
                    {"in_dtype": var.dtype, "out_dtype": dtype})
    return out


# -- the per-parameter form: set_gradient_clip --------------------------------------------------
def set_gradient_clip(clip, param_list=None, program=None):
    """Clip the gradients of ``param_list`` (Parameters or names; default: every parameter
    of ``program``) with ``clip`` when the optimizer has no ``grad_clip`` of its own. Call it
    before ``minimize``, as in Paddle (a later call does not change what minimize built)."""
    warnings.warn("set_gradient_clip is deprecated in Paddle 1.8; pass grad_clip= to the "
                  "optimizer instead", DeprecationWarning, stacklevel=2)
    if not isinstance(clip, GradientClipBase):
        raise ProgramError(f"set_gradient_clip: clip must be GradientClipByValue, "
                           f"GradientClipByNorm or GradientClipByGlobalNorm, got {clip!r}")
    program = program or default_main_program()
    block = program.global_block()
    if any(op.role == "optimize" for op in block.ops):
        warnings.warn("set_gradient_clip after minimize has no effect on the ops minimize "
                      "already built; call it before minimize", stacklevel=2)
    if param_list is None:
        params = block.all_parameters()
    else:
        params = []
        for p in param_list:
            if isinstance(p, str):
                if p not in block.vars or not isinstance(block.vars[p], Parameter):
                    raise ProgramError(f"set_gradient_clip: '{p}' is not a parameter of the "
                                       "program")
                p = block.vars[p]
            if not isinstance(p, Parameter):
                raise ProgramError(f"set_gradient_clip: param_list must hold Parameters or "
                                   f"their names, got {p!r}")
            params.append(p)
    for p in params:
        p.gradient_clip_attr = copy.deepcopy(clip)


def append_gradient_clip_ops(params_grads, grad_clip=None):
    """Append the clipping ops for ``params_grads`` and return the pairs to optimise.

    The optimizer's ``grad_clip`` clips every gradient it chooses; without one, each
    parameter's ``set_gradient_clip`` rule applies, parameters sharing a global-norm group
    (group_name) sharing one norm."""
    params_grads = list(params_grads)
    if grad_clip is not None:
        if not isinstance(grad_clip, GradientClipBase):
            raise ProgramError(f"grad_clip must be GradientClipByValue, GradientClipByNorm or "
                               f"GradientClipByGlobalNorm, got {grad_clip!r}")
        return grad_clip(params_grads)
    groups: dict = {}
    for p, g in params_grads:
        clip = getattr(p, "gradient_clip_attr", None)
        if clip is None or g is None:
            continue
        if isinstance(clip, GradientClipByGlobalNorm):
            key = ("global", clip.group_name)
            first = groups.get(key, (clip, []))[0]
            if first.clip_norm != clip.clip_norm:
                raise ProgramError(
                    f"set_gradient_clip: global-norm group '{clip.group_name}' has clip_norm "
                    f"{first.clip_norm} and {clip.clip_norm} ('{p.name}'); one group takes one "
                    "clip_norm")
        else:
            key = ("param", p.name)
        groups.setdefault(key, (clip, []))[1].append((p, g))
    for clip, members in groups.values():
        clip(members)
    return params_grads


__all__ = ["ErrorClipByValue", "GradientClipBase", "GradientClipByGlobalNorm",
           "GradientClipByNorm", "GradientClipByValue", "append_gradient_clip_ops",
           "set_gradient_clip"]
