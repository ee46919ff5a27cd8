"""Paddle's ``fluid.io`` save/load spellings (inference models, params, vars, ``io.save``) on
top of graphc's checkpoints (graphc.runtime.checkpoint: safetensors + manifest, never pickle).

Layouts (every file written to a temporary name and renamed):

- ``save_vars / save_params / save_persistables(exe, dirname, ..., filename=None)``: one
  checkpoint (``persistables.safetensors`` + ``manifest.json``) in ``dirname``, or in the
  sub-directory ``dirname/filename`` when ``filename`` is given (Paddle's "one combined
  file"); the ``load_*`` twins read the same place.
- ``save_inference_model(dirname, feeds, targets, exe, model_filename=None,
  params_filename=None)``: ``dirname/__model__`` (or ``model_filename``) holds the pruned test
  program as graphc's text IR (``graphc.parse`` reads it), ``dirname/__model__.json`` the
  feed and fetch names, and the parameters the pruned program reads are a checkpoint in
  ``dirname`` (or ``dirname/params_filename``). With ``export_for_deployment=False`` (as in
  Paddle) the unpruned program goes to ``dirname/__model__.main_program`` instead, with every
  persistable, and ``load_inference_model`` does not read it.
- ``io.save(program, "path/model")``: ``path/model.pdmodel`` (the whole program as text IR),
  ``path/model.pdparams/`` (a checkpoint of the parameters) and ``path/model.pdopt/`` (one of
  the other persistables: optimizer moments, learning rates, batch-norm statistics).

Loads are all-or-nothing: every tensor is read and checked before the scope changes.
"""

from __future__ import annotations

import copy
import json
import os
import warnings

import numpy as np

from ..ir import program_serial
from ..ir.default_programs import default_main_program
from ..ir.errors import ArgumentTypeError, GraphcError, ProgramError
from ..ir.program import Parameter, Program, Variable
from ..runtime import checkpoint
from ..runtime.checkpoint import CheckpointError
from ..runtime.scope import Scope, global_scope

MODEL_FILENAME = "__model__"
INFERENCE_FORMAT = "graphc-inference-model/1"


# Program.parse_from_string reads a Paddle ProgramDesc, and program.desc writes one, through
# paddle_format/program_desc.py; it (and protobuf) loads on the first such call, not with
# graphc: importing it replaces these two with its own functions
def _read_program_desc(data: bytes) -> Program:
    from .paddle_format import program_desc
    return program_desc._parse_from_string(data)


def _write_program_desc(program: Program):
    from .paddle_format import program_desc
    return program_desc.from_program(program, [], [])


program_serial.BINARY_READERS.setdefault(b"\x0a", _read_program_desc)
program_serial.BINARY_WRITERS.setdefault("ProgramDesc", _write_program_desc)


# -- which variables ---------------------------------------------------------------------
def is_parameter(var: Variable) -> bool:
    return isinstance(var, Parameter)


def is_persistable(var: Variable) -> bool:
    return bool(var.persistable)


def get_program_parameter(program: Program) -> list[Variable]:
    """The program's parameters (Paddle's ``fluid.io.get_program_parameter``)."""
    return [v for v in program.list_vars() if is_parameter(v)]


def get_program_persistable_vars(program: Program) -> list[Variable]:
    """The program's persistable variables (parameters, optimizer state, statistics)."""
    return [v for v in program.list_vars() if is_persistable(v)]


def _program(main_program, who: str) -> Program:
    from ..runtime.compiled_program import CompiledProgram
    program = main_program if main_program is not None else default_main_program()
    if isinstance(program, CompiledProgram):
        # Paddle saves the Program a CompiledProgram holds (the variables are the same)
        program = program.program
    if not isinstance(program, Program):
        # a TypeError, as Paddle's _get_valid_program raises
        raise ArgumentTypeError(f"{who}: main_program must be a Program, got "
                                f"{type(program).__name__}")
    return program


def get_parameter_value(para, executor) -> np.ndarray:
    """The value of parameter ``para`` in the global scope (Paddle's
    ``fluid.io.get_parameter_value``; ``executor`` ran the program that filled it)."""
    if not is_parameter(para):
        raise ArgumentTypeError(f"get_parameter_value: '{getattr(para, 'name', para)}' is not "
                                "a Parameter")
    scope = global_scope()
    if para.name not in scope:
        raise CheckpointError(f"get_parameter_value: '{para.name}' has no value in the scope "
                              "(run the program that initialises it first)")
    return np.array(scope[para.name])


def get_parameter_value_by_name(name: str, executor, program=None) -> np.ndarray:
    """``get_parameter_value`` of the parameter ``name`` of ``program`` (default main)."""
    program = _program(program, "get_parameter_value_by_name")
    var = program.global_block().vars.get(name)
    if var is None:
        raise ProgramError(f"get_parameter_value_by_name: the program has no variable "
                           f"'{name}'")
    return get_parameter_value(var, executor)


def _path(path, who: str, what: str = "dirname") -> str:
    if not isinstance(path, str | os.PathLike):
        raise CheckpointError(f"{who}: {what} must be a path, got {type(path).__name__}")
    return os.fspath(path)


def _resolve(program: Program, vars, predicate) -> list[Variable]:
    if vars is not None and (isinstance(vars, str | Variable) or not hasattr(vars, "__iter__")):
        raise CheckpointError(f"vars must be a list of Variables or names, got "
                              f"{type(vars).__name__}")
    if vars is None:
        if predicate is None:
            raise CheckpointError("give vars= (a list of Variables or names) or predicate=")
        return [v for v in program.list_vars() if predicate(v)]
    block, out = program.global_block(), []
    for v in vars:
        name = v.name if isinstance(v, Variable) else v
        if not isinstance(name, str) or not block.has_var(name):
            raise CheckpointError(f"variable {name!r} is not in the program")
        out.append(block.var(name))
    return out


def _view(variables) -> Program:
    """A program holding only ``variables`` (as persistables): the set a checkpoint holds."""
    view = Program()
    block = view.global_block()
    for v in variables:
        nv = copy.copy(v)
        nv.block, nv.persistable = block, True
        block.vars[v.name] = nv
    return view


def _where(dirname: str, filename: str | None) -> str:
    return dirname if filename is None else os.path.join(dirname, filename)


def _require_values(variables) -> None:
    """Before any directory is made: every variable to save has a value (else the failed
    save would leave empty directories behind)."""
    scope = global_scope()
    for v in variables:
        if v.name not in scope:
            raise CheckpointError(f"cannot save '{v.name}': it has no value in the scope "
                                  "(run the startup program first)")


def _save(variables, dirname: str, scope: Scope | None = None) -> None:
    checkpoint.save(_view(variables), dirname, global_scope() if scope is None else scope)


def _stage(variables, dirname: str, staged: Scope) -> None:
    if not os.path.isdir(dirname):
        raise CheckpointError(f"no saved variables at '{dirname}' (not a directory)")
    checkpoint.load(_view(variables), dirname, staged)


def _commit(staged: Scope, scope: Scope | None) -> None:
    scope = global_scope() if scope is None else scope
    for name in staged.keys():
        scope[name] = staged.held(name)


# -- save_vars family ------------------------------------------------------------------------
def save_vars(executor, dirname: str, main_program: Program | None = None, vars=None,
              predicate=None, filename: str | None = None) -> None:
    """Save ``vars`` (or the program's variables for which ``predicate`` holds) from the
    global scope into ``dirname`` (``dirname/filename`` when given)."""
    program = _program(main_program, "save_vars")
    _save(_resolve(program, vars, predicate), _where(_path(dirname, "save_vars"), filename))


def load_vars(executor, dirname: str, main_program: Program | None = None, vars=None,
              predicate=None, filename: str | None = None) -> None:
    """Load what ``save_vars`` saved into the global scope; nothing changes on error."""
    program = _program(main_program, "load_vars")
    staged = Scope()
    _stage(_resolve(program, vars, predicate), _where(_path(dirname, "load_vars"), filename),
           staged)
    _commit(staged, None)


def save_params(executor, dirname, main_program=None, filename=None) -> None:
    save_vars(executor, dirname, main_program, predicate=is_parameter, filename=filename)


def load_params(executor, dirname, main_program=None, filename=None) -> None:
    load_vars(executor, dirname, main_program, predicate=is_parameter, filename=filename)


def save_persistables(executor, dirname, main_program=None, filename=None) -> None:
    save_vars(executor, dirname, main_program, predicate=is_persistable, filename=filename)


def load_persistables(executor, dirname, main_program=None, filename=None) -> None:
    load_vars(executor, dirname, main_program, predicate=is_persistable, filename=filename)


# -- inference models --------------------------------------------------------------------------
def warn_auc_states(program: Program) -> None:
    """An auc op keeps its counts in persistable state, which an inference model saves as
    they are: say so (Paddle warns too), since a reloaded model would go on from them."""
    if any(op.type == "auc" for op in program.global_block().ops):
        warnings.warn("save_inference_model: the program has an auc op whose statistics "
                      "are saved as they are now; reset them to zeros first if the saved "
                      "model should start counting afresh", stacklevel=3)


def prune_for_inference(program: Program, feed_names: list[str],
                        target_names: list[str]) -> Program:
    """The test-mode program (``clone(for_test=True)``) cut to the ops the targets need,
    starting from the feeds: ops computing a fed variable, backward and optimizer ops and
    unused branches are dropped; a fed intermediate becomes a data variable."""
    pruned = program.clone(for_test=True)
    block = pruned.global_block()
    for name in list(feed_names) + list(target_names):
        if not program.global_block().has_var(name):
            raise GraphcError(f"save_inference_model: '{name}' is not a variable of the "
                              "program")
    feeds = set(feed_names)
    needed, kept = set(target_names) - feeds, []
    for op in reversed(block.ops):
        if needed.intersection(op.output_arg_names):
            kept.append(op)
            needed.update(n for n in op.input_arg_names if n not in feeds)
    kept.reverse()
    produced = {n for op in kept for n in op.output_arg_names}
    for name in sorted(needed - produced):
        var = block.var(name)
        if not (var.persistable or var.is_data):
            raise GraphcError(f"save_inference_model: the targets need '{name}', which is "
                              "neither fed nor computed from the feeds")
        if var.is_data and name not in feeds:
            raise GraphcError(f"save_inference_model: the targets need the data variable "
                              f"'{name}', which is not in feeded_var_names {sorted(feeds)}")
    used = produced | needed | feeds
    block.ops = kept
    block.vars = {n: v for n, v in block.vars.items() if n in used}
    for name in feeds:
        var = block.vars[name]
        if not var.is_data:
            var.is_data = var.need_check_feed = True
    pruned._bump()
    return pruned


def _write_text(path: str, text: str) -> None:
    def write(tmp):
        with open(tmp, "w") as f:
            f.write(text)
    try:
        checkpoint.atomic_write(path, write)
    except OSError as exc:
        raise CheckpointError(f"cannot write '{path}': {exc.strerror or exc}") from None


def save_inference_model(dirname: str, feeded_var_names, target_vars, executor,
                         main_program: Program | None = None, model_filename=None,
                         params_filename=None, export_for_deployment: bool = True,
                         program_only: bool = False) -> list[str]:
    """Save the program pruned to what ``target_vars`` need from ``feeded_var_names`` (test
    mode) and the persistables it reads; returns the fetch names. See the module doc."""
    program = _program(main_program, "save_inference_model")
    dirname = _path(dirname, "save_inference_model")
    if feeded_var_names is None or getattr(feeded_var_names, "__iter__", None) is None:
        raise GraphcError("save_inference_model: feeded_var_names must be a list of names, "
                          f"got {type(feeded_var_names).__name__}")
    feeds = [feeded_var_names] if isinstance(feeded_var_names, str) else list(feeded_var_names)
    targets = target_vars if isinstance(target_vars, list | tuple) else [target_vars]
    fetch = [t.name if isinstance(t, Variable) else t for t in targets]
    if not all(isinstance(f, str) for f in feeds + fetch):
        raise GraphcError("save_inference_model: feeded_var_names must be names and "
                          "target_vars Variables (or names)")
    if not export_for_deployment:
        # Paddle 1.8: the whole program, unpruned, as <model>.main_program, with every
        # persistable it has; a training snapshot, not something load_inference_model reads
        if not program_only:
            _require_values(get_program_persistable_vars(program))
        checkpoint.prepare_directory(dirname)
        if not program_only:
            _save(get_program_persistable_vars(program), _where(dirname, params_filename))
        _write_text(os.path.join(dirname, (model_filename or MODEL_FILENAME) + ".main_program"),
                    program.to_text())
        return fetch
    if not fetch:
        raise GraphcError("save_inference_model: target_vars is empty; name the Variables "
                          "the inference model computes (as in Paddle, only "
                          "export_for_deployment=False saves a program without targets)")
    warn_auc_states(program)
    pruned = prune_for_inference(program, feeds, fetch)
    if not program_only:
        _require_values(get_program_persistable_vars(pruned))
    checkpoint.prepare_directory(dirname)
    if not program_only:
        _save(get_program_persistable_vars(pruned), _where(dirname, params_filename))
    model = model_filename or MODEL_FILENAME
    _write_text(os.path.join(dirname, model), pruned.to_text())
    meta = {"format": INFERENCE_FORMAT, "feed": feeds, "fetch": fetch,
            "params": params_filename}
    _write_text(os.path.join(dirname, model + ".json"), json.dumps(meta, indent=1))
    return fetch


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        raise CheckpointError(f"no inference model file '{path}'") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"cannot read '{path}': {exc}") from None


def load_inference_model(dirname: str, executor, model_filename=None, params_filename=None,
                         pserver_endpoints=None) -> list:
    """``[program, feed_names, fetch_targets]`` of a saved inference model; its parameters go
    into the global scope (all or nothing)."""
    from ..ir.errors import ParseError
    from ..ir.text import parse
    dirname = _path(dirname, "load_inference_model")
    if not os.path.isdir(dirname):
        raise CheckpointError(f"no inference model at '{dirname}' (not a directory)")
    model = os.path.join(dirname, model_filename or MODEL_FILENAME)
    text, meta_text = _read(model), _read(model + ".json")
    try:
        meta = json.loads(meta_text)
        feeds, fetch = list(meta["feed"]), list(meta["fetch"])
        if meta.get("format") != INFERENCE_FORMAT:
            raise ValueError(f"format is {meta.get('format')!r}, not {INFERENCE_FORMAT!r}")
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"'{model}.json' is not a graphc inference model's feed/fetch "
                              f"file: {exc}") from None
    try:
        program = parse(text).to_program()
    except (ParseError, GraphcError) as exc:
        raise CheckpointError(f"'{model}' does not parse as graphc's text IR: {exc}") from None
    block = program.global_block()
    missing = [n for n in feeds + fetch if not block.has_var(n)]
    if missing:
        raise CheckpointError(f"'{model}' has no variable(s) {missing} named in '{model}.json'")
    persistables = get_program_persistable_vars(program)
    if persistables:
        staged = Scope()
        _stage(persistables, _where(dirname, params_filename), staged)
        _commit(staged, None)
    return [program, feeds, [block.var(n) for n in fetch]]


# -- io.save / io.load ---------------------------------------------------------------------------
def _prefix(model_path: str) -> str:
    for suffix in (".pdparams", ".pdopt", ".pdmodel"):
        if model_path.endswith(suffix):
            return model_path[: -len(suffix)]
    return model_path


def _saved_names(dirname: str) -> set[str]:
    """The tensors a checkpoint directory holds (none when it is absent)."""
    if not os.path.isdir(dirname):
        return set()
    return set(checkpoint.read_manifest(dirname)["tensors"])


def _optimizer_vars(program: Program) -> list[Variable]:
    return [v for v in get_program_persistable_vars(program) if not is_parameter(v)]


def save(program: Program, model_path: str) -> None:
    """Paddle 1.8's ``fluid.io.save``: ``model_path.pdparams/``, ``.pdopt/`` (checkpoints)
    and ``.pdmodel`` (the program as text IR)."""
    if not isinstance(program, Program):
        raise GraphcError(f"io.save expects a Program, got {type(program).__name__}")
    prefix = _prefix(_path(model_path, "io.save", "model_path"))
    if os.path.basename(prefix) == "":
        raise CheckpointError(f"io.save: model_path '{model_path}' names a directory; give "
                              "a path prefix such as 'out/model'")
    opt = _optimizer_vars(program)
    _require_values(get_program_parameter(program) + opt)
    checkpoint.prepare_directory(os.path.dirname(prefix) or ".")
    _save(get_program_parameter(program), prefix + ".pdparams")
    if opt:
        _save(opt, prefix + ".pdopt")
    _write_text(prefix + ".pdmodel", program.to_text())


def load(program: Program, model_path: str, executor=None, var_list=None) -> None:
    """Paddle 1.8's ``fluid.io.load``: the parameters from ``.pdparams`` and the optimizer
    state from ``.pdopt`` (required when the program has any) into the global scope, all or
    nothing; ``var_list`` limits it to those variables."""
    if not isinstance(program, Program):
        raise GraphcError(f"io.load expects a Program, got {type(program).__name__}")
    prefix = _prefix(_path(model_path, "io.load", "model_path"))
    if not os.path.exists(prefix + ".pdparams") and os.path.exists(model_path):
        _load_saved_vars(program, os.fspath(model_path), var_list)
        return
    params, opt = get_program_parameter(program), _optimizer_vars(program)
    if var_list is not None:
        wanted = {v.name for v in _resolve(program, var_list, None)}
        params = [v for v in params if v.name in wanted]
        opt = [v for v in opt if v.name in wanted]
    staged = Scope()
    # a startup program's copy of a parameter is a plain persistable here (a Parameter in
    # Paddle): what .pdparams holds loads from there (sentiment_classification loads its
    # checkpoint into the startup program)
    saved = _saved_names(prefix + ".pdparams") if opt else set()
    params += [v for v in opt if v.name in saved]
    opt = [v for v in opt if v.name not in saved]
    if params:
        _stage(params, prefix + ".pdparams", staged)
    if opt:
        if not os.path.isdir(prefix + ".pdopt"):
            raise CheckpointError(f"no optimizer state at '{prefix}.pdopt' for the program's "
                                  f"{len(opt)} optimizer variable(s) (e.g. '{opt[0].name}')")
        _stage(opt, prefix + ".pdopt", staged)
    _commit(staged, None)


def _load_saved_vars(program: Program, path: str, var_list) -> None:
    """Paddle 1.8's io.load of what save_vars/save_params/save_persistables (or
    save_inference_model) wrote: a directory gives every variable of the program that has a
    file there (or that its graphc checkpoint holds); one combined file needs ``var_list``."""
    from .paddle_format import files
    staged = Scope()
    if os.path.isdir(path):
        if files.is_graphc_checkpoint(path, None):
            held = set(checkpoint.read_manifest(path)["tensors"])
            _stage([v for v in program.list_vars() if v.name in held], path, staged)
        else:
            found = [v for v in program.list_vars() if v.persistable
                     and os.path.isfile(os.path.join(path, v.name))]
            for name, value in files.read(found, path).items():
                staged[name] = value
    else:
        if var_list is None:
            raise CheckpointError(f"io.load: '{path}' is one file (Paddle's combined format); "
                                  "give var_list, the variables it holds")
        chosen = _resolve(program, var_list, None)
        for name, value in files.read(chosen, os.path.dirname(path) or ".",
                                      os.path.basename(path)).items():
            staged[name] = value
    _commit(staged, None)
