"""Loading an inference model in either format: Paddle 1.x's (``__model__`` ProgramDesc and
tensor files) or graphc's own (``__model__.json``), persistables into the global scope."""

from __future__ import annotations

import os

from ...runtime.checkpoint import CheckpointError
from ...runtime.scope import global_scope
from .. import saving as _graphc
from . import files
from .program_desc import to_program

MODEL_FILENAME = "__model__"


def load(dirname, executor, model_filename=None, params_filename=None,
         pserver_endpoints=None):
    """``[program, feed_names, fetch_targets]`` of the model saved in ``dirname``; its
    persistables go into the global scope, all or nothing."""
    dirname = _graphc._path(dirname, "load_inference_model")
    model = os.path.join(dirname, os.path.basename(model_filename or MODEL_FILENAME))
    if os.path.isfile(model + ".json"):  # graphc's own inference model
        return _graphc.load_inference_model(dirname, executor, model_filename,
                                            params_filename, pserver_endpoints)
    if not os.path.isdir(dirname):
        raise CheckpointError(f"no inference model at '{dirname}' (not a directory)")
    program, feeds, fetch = to_program(files._read_file(model), f"'{model}'")
    block = program.global_block()
    persistables = _graphc.get_program_persistable_vars(program)
    if persistables:
        params = None if params_filename is None else os.path.basename(params_filename)
        scope = global_scope()
        for name, value in files.read(persistables, dirname, params).items():
            scope[name] = value
    return [program, feeds, [block.var(n) for n in fetch]]
