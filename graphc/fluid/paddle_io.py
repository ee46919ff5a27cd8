"""``fluid.io``'s save/load in Paddle 1.x's formats (graphc/dataio/paddle_format): variables as
LoDTensor files, ``__model__`` as a ProgramDesc; loads also read graphc's own checkpoints."""

from __future__ import annotations

import os
import warnings

from ..dataio import saving as _graphc
from ..dataio.paddle_format import files, inference_model
from ..dataio.paddle_format.program_desc import NoPaddleFormError, from_program
from ..dataio.saving import is_parameter, is_persistable
from ..ir.program import Program, Variable
from ..runtime.checkpoint import CheckpointError
from ..runtime.scope import global_scope

__all__ = ["_get_valid_program", "load_inference_model", "load_params", "load_persistables",
           "load_program_state",
           "load_vars", "save_inference_model", "save_params", "save_persistables",
           "save_vars", "set_program_state"]
MODEL_FILENAME = "__model__"


def _get_valid_program(main_program=None) -> Program:
    """Paddle's check of a ``main_program`` argument: the default main program for None, a
    CompiledProgram's Program, else a TypeError for what is not a Program."""
    return _graphc._program(main_program, "main_program")


def _values(variables) -> dict:
    _graphc._require_values(variables)
    scope = global_scope()
    return {v.name: scope[v.name] for v in variables}


def _commit(values: dict) -> None:
    scope = global_scope()
    for name, value in values.items():
        scope[name] = value


def save_vars(executor, dirname, main_program=None, vars=None, predicate=None, filename=None):
    """Paddle's ``fluid.io.save_vars``: ``vars`` (or the program's variables for which
    ``predicate`` holds) as one LoDTensor file each in ``dirname``, or all in
    ``dirname/filename`` sorted by name (Paddle's save_combine)."""
    program = _graphc._program(main_program, "save_vars")
    if dirname is None and filename is None:
        # Paddle 1.8 saves to memory then: the combined stream comes back as bytes
        return files.encode_combined(_values(_graphc._resolve(program, vars, predicate)))
    dirname = _graphc._path(dirname, "save_vars")
    variables = _graphc._resolve(program, vars, predicate)
    files.write(_values(variables), dirname, filename)
    return None


def load_vars(executor, dirname, main_program=None, vars=None, predicate=None, filename=None):
    """Load what ``save_vars`` (Paddle's or graphc's) saved into the global scope; every
    tensor is read and checked against the program before any is loaded."""
    program = _graphc._program(main_program, "load_vars")
    dirname = _graphc._path(dirname, "load_vars")
    if files.is_graphc_checkpoint(dirname, filename):
        return _graphc.load_vars(executor, dirname, program, vars, predicate, filename)
    _commit(files.read(_graphc._resolve(program, vars, predicate), dirname, filename))
    return None


def save_params(executor, dirname, main_program=None, filename=None):
    return save_vars(executor, dirname, main_program, predicate=is_parameter, filename=filename)


def load_params(executor, dirname, main_program=None, filename=None):
    load_vars(executor, dirname, main_program, predicate=is_parameter, filename=filename)


def save_persistables(executor, dirname, main_program=None, filename=None):
    return save_vars(executor, dirname, main_program, predicate=is_persistable,
                     filename=filename)


def load_persistables(executor, dirname, main_program=None, filename=None):
    load_vars(executor, dirname, main_program, predicate=is_persistable, filename=filename)


def save_inference_model(dirname, feeded_var_names, target_vars, executor, main_program=None,
                         model_filename=None, params_filename=None,
                         export_for_deployment=True, program_only=False):
    """Paddle's ``fluid.io.save_inference_model``: the program pruned to the targets (test
    mode) as ``dirname/__model__`` (Paddle's ProgramDesc, feed/fetch ops included) and the
    persistables it reads as Paddle's tensor files (``params_filename``: one file). Returns
    the fetch names. ``export_for_deployment=False`` saves graphc's training snapshot."""
    if not export_for_deployment:
        return _graphc.save_inference_model(dirname, feeded_var_names, target_vars, executor,
                                            main_program, model_filename, params_filename,
                                            export_for_deployment, program_only)
    program = _graphc._program(main_program, "save_inference_model")
    dirname = _graphc._path(dirname, "save_inference_model")
    feeds = [feeded_var_names] if isinstance(feeded_var_names, str) else feeded_var_names
    if feeds is None or not all(isinstance(f, str) for f in feeds):
        raise CheckpointError("save_inference_model: feeded_var_names must be a list of names")
    feeds = list(feeds)
    targets = target_vars if isinstance(target_vars, list | tuple) else [target_vars]
    fetch = [t.name if isinstance(t, Variable) else t for t in targets]
    if not fetch:
        raise CheckpointError("save_inference_model: target_vars is empty; name the Variables "
                              "the inference model computes (as in Paddle, only "
                              "export_for_deployment=False saves a program without targets)")
    if not all(isinstance(f, str) for f in fetch):
        raise CheckpointError("save_inference_model: target_vars must be Variables or names")
    _graphc.warn_auc_states(program)
    pruned = _graphc.prune_for_inference(program, feeds, fetch)
    try:
        model = from_program(pruned, feeds, fetch)
    except NoPaddleFormError as exc:
        # Paddle's book tests save a DynamicRNN model and load it back in the same script:
        # graphc's own format keeps that working; only Paddle itself cannot read the result
        warnings.warn(f"save_inference_model: {exc}; '{dirname}' holds graphc's own inference "
                      "format instead (graphc's load_inference_model and predictors read it, "
                      "Paddle cannot)", stacklevel=2)
        return _graphc.save_inference_model(dirname, feeds, fetch, executor, program,
                                            model_filename, params_filename, True,
                                            program_only)
    persistables = _graphc.get_program_persistable_vars(pruned)
    values = {} if program_only else _values(persistables)
    if values:
        files.write(values, dirname, params_filename)
    else:
        files.write({}, dirname)
    files._write_verified(os.path.join(dirname, os.path.basename(
        model_filename or MODEL_FILENAME)), model)
    return fetch


def load_inference_model(dirname, executor, model_filename=None, params_filename=None,
                         pserver_endpoints=None):
    """``[program, feed_names, fetch_targets]`` of an inference model Paddle (``__model__``
    ProgramDesc + tensor files) or graphc saved; its persistables go into the global scope,
    all or nothing."""
    return inference_model.load(dirname, executor, model_filename, params_filename,
                                pserver_endpoints)


def load_program_state(model_path, var_list=None):
    """Paddle's ``fluid.io.load_program_state``: ``{name: ndarray}`` from a directory of
    per-variable files, a combined file (``var_list`` names its variables, in the program's
    order as Paddle's), or graphc's ``io.save`` prefix (``.pdparams``/``.pdopt``)."""
    from ..runtime import checkpoint
    path = _graphc._path(model_path, "load_program_state", "model_path")
    prefix = _graphc._prefix(path)
    if os.path.isdir(prefix + ".pdparams"):
        state = {}
        for part in (".pdparams", ".pdopt"):
            if os.path.isdir(prefix + part):
                state.update(checkpoint.read_tensors(os.path.join(prefix + part,
                                                                  checkpoint.TENSORS)))
        return state
    if os.path.isfile(prefix + ".pdparams"):
        raise CheckpointError(f"'{prefix}.pdparams' is a Paddle pickle file (fluid.save); "
                              "graphc does not unpickle: save it with fluid.io.save_params "
                              "in Paddle, or with graphc's io.save")
    if os.path.isdir(path):
        if files.is_graphc_checkpoint(path, None):
            return checkpoint.read_tensors(os.path.join(path, checkpoint.TENSORS))
        if var_list is None:
            return files.read_all(path)
        return files.read(_listed(var_list), path)
    if os.path.isfile(path):
        if var_list is None:
            raise CheckpointError(f"load_program_state: '{path}' is one file (Paddle's "
                                  "combined format); give var_list, the variables it holds")
        return files.read(_listed(var_list), os.path.dirname(path) or ".",
                          os.path.basename(path))
    raise CheckpointError(f"load_program_state: nothing at '{path}'")


def _listed(var_list) -> list:
    if not all(isinstance(v, Variable) for v in var_list):
        raise CheckpointError("load_program_state: var_list must be a list of Variables")
    return list(var_list)


def set_program_state(program, state_dict):
    """Paddle's ``fluid.io.set_program_state``: the persistables of ``program`` found in
    ``state_dict`` get those values (dtype and shape checked first, then all at once); the
    names of persistables without a value are returned (Paddle only warns about them)."""
    if not isinstance(program, Program):
        raise CheckpointError(f"set_program_state expects a Program, got "
                              f"{type(program).__name__}")
    if not isinstance(state_dict, dict):
        raise CheckpointError("set_program_state: state_dict must be a dict {name: array}")
    import numpy as np
    staged, unset = {}, []
    for var in _graphc.get_program_persistable_vars(program):
        if var.name not in state_dict:
            unset.append(var.name)
            continue
        staged[var.name] = files._check(var, np.asarray(state_dict[var.name]), "state_dict")
    _commit(staged)
    return unset
