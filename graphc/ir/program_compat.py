"""Program methods Paddle 1.8's own code and unit tests call beyond building (block nesting,
pruning, ``desc``, parameter-info copies); mixed into ir/program.py's Program."""

from __future__ import annotations

import contextvars
import numbers

from .errors import ArgumentTypeError, ArgumentValueError

__all__ = ["ProgramCompat", "kept_op_indices", "pruned_copy"]

_DIST_INFO = ("_is_distributed", "_is_chief", "_endpoints", "_ps_endpoint",
              "_trainers_endpoints", "_distributed_lookup_table")


def kept_op_indices(block, feeds: set[str], targets: set[str], ops) -> tuple:
    """The indices of ``block``'s ops computing ``targets`` from ``feeds`` (ops writing a
    fed name are cut off), plus the ops in ``ops`` and what they read, in program order."""
    chosen = {id(op) for op in ops}
    needed, kept = set(targets) - feeds, []
    for i in range(len(block.ops) - 1, -1, -1):
        op = block.ops[i]
        if id(op) in chosen or needed.intersection(op.output_arg_names):
            kept.append(i)
            needed.update(n for n in op.input_arg_names if n not in feeds)
    return tuple(reversed(kept))


class _ProgramDesc:
    """``program.desc``: the program as Paddle's ProgramDesc protobuf, made when asked."""

    def __init__(self, program):
        self._program = program

    def serialize_to_string(self) -> bytes:
        # the protobuf writer sits in dataio (it needs protobuf), which registers it here
        from .errors import GraphcError
        from .program_serial import BINARY_WRITERS
        writer = BINARY_WRITERS.get("ProgramDesc")
        if writer is None:
            raise GraphcError("program.desc.serialize_to_string needs graphc.dataio "
                              "(import graphc): no ProgramDesc writer is registered")
        return writer(self._program)

    def num_blocks(self) -> int:
        return self._program.num_blocks


def pruned_copy(program, kept: tuple, feeds: set[str]):
    """A clone of ``program`` whose global block keeps the ops at ``kept``; a fed
    intermediate becomes data there (its producers are gone)."""
    pruned = program.clone()
    pblock = pruned.global_block()
    pblock.ops = [pblock.ops[i] for i in kept]
    for name in feeds:
        var = pblock.vars.get(name)
        if var is not None and not var.is_data:
            var.is_data = var.need_check_feed = True
    return pruned


class ProgramCompat:
    """Paddle 1.8's block nesting (``_create_block``/``_rollback``), pruning, ``desc`` and the
    random_seed and parameter-info checks, on top of the Program builder."""

    # -- the random seed: an int, as Paddle checks it ----------------------------------
    @property
    def random_seed(self) -> int:
        return self._random_seed

    @random_seed.setter
    def random_seed(self, seed) -> None:
        if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
            raise ArgumentValueError(f"Program.random_seed must be an int, got {seed!r}")
        self._random_seed = int(seed)  # numpy's integers too

    # -- blocks --------------------------------------------------------------------------
    def current_block(self):
        return self.blocks[getattr(self, "_current_idx", 0)]

    def _create_block(self, parent_idx: int | None = None):
        """A new block nested in the current one (or in ``parent_idx``); it becomes current.
        graphc runs programs whose ops are in block 0 (control flow builds regions there):
        a block made here holds variables and ops for inspection and serialization."""
        from .program import Block
        parent = self.current_block().idx if parent_idx is None else int(parent_idx)
        block = Block(self, len(self.blocks), parent)
        self.blocks.append(block)
        self._current_idx = block.idx
        self._bump()
        return block

    def _rollback(self) -> None:
        """The current block's parent becomes current again."""
        self._current_idx = max(self.current_block().parent_idx, 0)

    @property
    def desc(self) -> _ProgramDesc:
        return _ProgramDesc(self)

    # -- pruning -------------------------------------------------------------------------
    def _prune(self, targets):
        """A copy holding only the ops ``targets`` (Variables or Operators) need."""
        return self._prune_with_input([], targets)

    def _prune_with_input(self, feeded_var_names, targets):
        """A copy holding only the ops computing ``targets`` from ``feeded_var_names``: ops
        writing a fed name are cut off and the fed names become data."""
        from .program import Operator, Variable
        if isinstance(feeded_var_names, str):
            feeded_var_names = [feeded_var_names]
        if not isinstance(feeded_var_names, list | tuple) or \
                not all(isinstance(n, str) for n in feeded_var_names):
            raise ArgumentValueError("Program._prune_with_input: feeded_var_names must be a "
                                     f"list of variable names (str), got {feeded_var_names!r}")
        if not isinstance(targets, list | tuple):
            targets = [targets]
        names, ops = set(), []
        for t in targets:
            if isinstance(t, Variable):
                names.add(t.name)
            elif isinstance(t, str):
                names.add(t)
            elif isinstance(t, Operator):
                ops.append(t)
            else:
                raise ArgumentValueError("Program._prune: every target must be a Variable or "
                                         f"an Operator, got {type(t).__name__}")
        block = self.global_block()
        feeds = set(feeded_var_names)
        kept = kept_op_indices(block, feeds, names, ops)
        pruned = pruned_copy(self, kept, feeds)
        pblock = pruned.global_block()
        # as Paddle's prune, the variables no kept op uses go too (saving the pruned
        # program's persistables saves what it reads, not the optimizer's state)
        used = feeds | names | {n for op in pblock.ops
                                for n in op.input_arg_names + op.output_arg_names}
        pblock.vars = {n: v for n, v in pblock.vars.items() if n in used}
        pruned._bump()
        return pruned

    # -- parameter information -----------------------------------------------------------
    def _copy_param_info_from(self, other) -> None:
        """The trainable flag, optimize_attr and regularizer of ``other``'s parameters onto
        this program's parameters of the same names."""
        from .program import Parameter, Program
        if not isinstance(other, Program):
            raise ArgumentTypeError("Program._copy_param_info_from: other must be a Program, "
                                    f"got {type(other).__name__}")
        mine = self.global_block().vars
        for p in other.global_block().all_parameters():
            q = mine.get(p.name)
            if isinstance(q, Parameter):
                q.trainable, q.regularizer = p.trainable, p.regularizer
                q.optimize_attr = dict(p.optimize_attr)

    def _copy_dist_param_info_from(self, other) -> None:
        """The distributed-training marks of ``other`` (set by a transpiler) onto this one."""
        from .program import Program
        if not isinstance(other, Program):
            raise ArgumentTypeError("Program._copy_dist_param_info_from: other must be a "
                                    f"Program, got {type(other).__name__}")
        for name in _DIST_INFO:
            if hasattr(other, name):
                setattr(self, name, getattr(other, name))


# -- unitrd3: Paddle's op name scopes and op.desc ------------------------------------------
# the name scope ops are created in ('/' outside any; fluid.name_scope sets it): a context
# variable, so threads and nested ``with`` blocks each see their own
OP_NAMESCOPE: contextvars.ContextVar[str] = contextvars.ContextVar("graphc_op_namescope",
                                                                   default="/")


class OpDescView:
    """``op.desc`` as Paddle's tests read it: the op's attributes, plus ``op_namescope``
    (the ``fluid.name_scope`` path the op was created in, '/s1/s2/'), and its slots."""

    def __init__(self, op):
        self._op = op

    def type(self) -> str:
        return self._op.type

    def attr(self, name: str):
        if name == "op_namescope":
            return getattr(self._op, "namescope", "/")
        return self._op.attr(name)

    def has_attr(self, name: str) -> bool:
        return name == "op_namescope" or self._op.has_attr(name)

    def attr_names(self) -> list[str]:
        return [*self._op.attr_names, "op_namescope"]

    def input(self, slot: str) -> list[str]:
        return self._op.input(slot)

    def output(self, slot: str) -> list[str]:
        return self._op.output(slot)

    def input_arg_names(self) -> list[str]:
        return self._op.input_arg_names

    def output_arg_names(self) -> list[str]:
        return self._op.output_arg_names
