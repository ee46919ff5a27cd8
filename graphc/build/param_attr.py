"""ParamAttr: how a layer should create a parameter (name, initializer, lr, trainable);
WeightNormParamAttr: the same, the weight reparametrised as g * v / ||v|| (weight norm).

``False`` in place of a ParamAttr means "no such parameter" (e.g. ``bias_attr=False``).
"""

from __future__ import annotations

import copy

from ..ir.errors import ProgramError
from .initializer import Initializer


class ParamAttr:
    """Paddle 1.8's arguments, in its order: ``do_model_average=False`` leaves the parameter
    out of ModelAverage/ExponentialMovingAverage. Keyword-only extras: ``gradient_clip``
    (1.6/1.7's; a GradientClip* object clipping this gradient when the optimizer has no
    grad_clip, as set_gradient_clip does) and ``need_clip=False`` (2.0's: out of grad_clip)."""

    def __init__(self, name: str | None = None, initializer: Initializer | None = None,
                 learning_rate: float = 1.0, regularizer=None, trainable: bool = True,
                 do_model_average: bool = True, *, gradient_clip=None, need_clip: bool = True):
        if initializer is not None and not isinstance(initializer, Initializer):
            raise ProgramError(f"ParamAttr initializer must be an Initializer, got "
                               f"{type(initializer).__name__}")
        self.name, self.initializer = name, initializer
        self.learning_rate, self.regularizer = float(learning_rate), regularizer
        self.trainable, self.need_clip = trainable, need_clip
        self.gradient_clip, self.do_model_average = gradient_clip, bool(do_model_average)

    def _set_on(self, param) -> None:
        """Give a new Parameter the attributes the optimizer and the averages read from it."""
        if self.gradient_clip is not None:
            param.gradient_clip_attr = copy.deepcopy(self.gradient_clip)
        param.do_model_average = self.do_model_average

    @staticmethod
    def to_attr(arg) -> ParamAttr | bool:
        """Accept None, True (a default attribute), a name, an Initializer, a ParamAttr or
        False (no parameter), as Paddle does."""
        if arg is None or arg is True:
            return ParamAttr()
        if arg is False:
            return False
        if isinstance(arg, ParamAttr):
            return arg
        if isinstance(arg, str):
            return ParamAttr(name=arg)
        if isinstance(arg, Initializer):
            return ParamAttr(initializer=arg)
        raise ProgramError(f"cannot make a ParamAttr from {type(arg).__name__} {arg!r}")

    def __repr__(self) -> str:
        return (f"ParamAttr(name={self.name!r}, initializer={self.initializer!r}, "
                f"learning_rate={self.learning_rate}, trainable={self.trainable})")


class WeightNormParamAttr(ParamAttr):
    """Paddle 1.8's weight normalisation (Salimans & Kingma 2016): the layer's weight is
    ``w = g * v / ||v||``, the norm over every dimension but ``dim`` (None: the whole
    tensor). LayerHelper makes two parameters, ``<name>_v`` (shape of w, initialised by
    ``initializer``) and ``<name>_g`` (size-1 dimensions but ``dim``, initialised to ||v||,
    so w starts as v), and computes w from them with ops in the main program."""

    def __init__(self, dim=None, name=None, initializer=None, learning_rate=1.0,
                 regularizer=None, trainable=True, do_model_average=False, *,
                 gradient_clip=None):
        # gradient_clip: Paddle 1.6/1.7's argument (before do_model_average there), by keyword
        super().__init__(name=name, initializer=initializer, learning_rate=learning_rate,
                         regularizer=regularizer, trainable=trainable,
                         gradient_clip=gradient_clip, do_model_average=do_model_average)
        if dim is not None and (isinstance(dim, bool) or not isinstance(dim, int)):
            raise ProgramError(f"WeightNormParamAttr: dim must be an int or None, got {dim!r}")
        self.dim = dim

    def __repr__(self) -> str:
        return f"WeightNormParamAttr(dim={self.dim!r}, {super().__repr__()[len('ParamAttr('):]}"
