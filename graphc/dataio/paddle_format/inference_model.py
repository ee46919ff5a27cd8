"""Loading an inference model in either format: Paddle 1.x's (``__model__`` ProgramDesc and
tensor files) or graphc's own (``__model__.json``), persistables into the global scope."""

from __future__ import annotations

import os

from ...ir.errors import ArgumentValueError
from ...runtime.checkpoint import CheckpointError
from ...runtime.scope import global_scope
from .. import saving as _graphc
from . import files
from .program_desc import to_program

MODEL_FILENAME = "__model__"


def load(dirname, executor, model_filename=None, params_filename=None,
         pserver_endpoints=None):
    """``[program, feed_names, fetch_targets]`` of the model saved in ``dirname``; its
    persistables go into the global scope, all or nothing. ``dirname`` None: Paddle 1.8's
    model in memory, ``model_filename`` the ProgramDesc bytes and ``params_filename`` the
    combined parameter bytes (``save_persistables(exe, None, program)``'s)."""
    if dirname is None:
        return _from_memory(model_filename, params_filename)
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


def _from_memory(model, params):
    for what, data in (("model_filename", model), ("params_filename", params)):
        if not isinstance(data, bytes | bytearray):
            raise ArgumentValueError(f"load_inference_model(None, ...): {what} must be the "
                                     f"saved bytes of a model in memory, got "
                                     f"{type(data).__name__}")
    program, feeds, fetch = to_program(bytes(model), "the model bytes")
    persistables = _graphc.get_program_persistable_vars(program)
    values = files.read_combined(persistables, bytes(params), "the parameter bytes")
    scope = global_scope()
    for name, value in values.items():
        scope[name] = value
    block = program.global_block()
    return [program, feeds, [block.var(n) for n in fetch]]
