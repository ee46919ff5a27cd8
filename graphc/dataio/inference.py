"""Loading a saved inference model into a predictor (graphc.runtime.predictor): whatever
``load_inference_model`` reads, its parameters loaded into a scope of the predictor's own.

``load_predictor(dirname, model_filename=None, params_filename=None, place=None)`` reads
the model with ``load_inference_model`` (so every format that function reads loads here),
inside ``scope_guard`` of a new Scope: the global scope never sees the parameters, and two
predictors of one model never share them unless cloned. Nothing is loaded when it fails.
"""

from __future__ import annotations

import os

from ..runtime.checkpoint import CheckpointError
from ..runtime.executor import Executor
from ..runtime.predictor import Predictor, PredictorError
from ..runtime.scope import Scope, scope_guard

__all__ = ["load_predictor"]


def load_predictor(dirname, model_filename: str | None = None,
                   params_filename: str | None = None, place=None,
                   check_data: bool | None = None) -> Predictor:
    """A Predictor of the inference model saved in ``dirname`` (see the module doc)."""
    if not isinstance(dirname, str | os.PathLike) or not str(dirname):
        raise PredictorError(f"the predictor's config names no model directory (got "
                             f"{dirname!r}); set model_dir, or prog_file and params_file")
    dirname = os.fspath(dirname)
    if not os.path.isdir(dirname):
        raise CheckpointError(f"no inference model at '{dirname}' (no such directory)")
    # Paddle's formats (and protobuf) load with the first model read, not with graphc
    from .paddle_format.inference_model import load as load_inference_model
    scope = Scope()
    with scope_guard(scope):
        program, feeds, fetch = load_inference_model(dirname, Executor(place), model_filename,
                                                     params_filename)
    return Predictor(program, feeds, [v.name for v in fetch], scope, place, check_data)
