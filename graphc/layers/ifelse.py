"""Paddle's IfElse: the batch split row by row by a [N, 1] bool, each part through its block,
merged back. One ``ifelse`` op: both blocks run on every row, each row kept from its own
block (docs/control_flow.md), so the blocks may use row-wise ops only (ops/cond/rowwise.py)."""

from __future__ import annotations

from ..ir import unique_name
from ..ir.default_programs import default_main_program
from ..ir.errors import ArgumentTypeError, ProgramError
from ..ir.program import Parameter, Variable
from ..ir.regions import BlockMark, take
from ..ops.cond.rowwise import row_wise_refusal
from .conditional import Branch, build_region_op, named_helper, touches, where_at

_OUT, _TRUE, _FALSE = range(3)


class IfElse:
    """``ie = IfElse(cond)``; ``with ie.true_block():`` / ``with ie.false_block():`` take rows
    with ``ie.input(x)`` and give results with ``ie.output(...)``; ``ie()`` is the list of
    merged outputs, row r from the true block where cond[r] else from the false block."""

    def __init__(self, cond, name=None):
        if not isinstance(cond, Variable):
            raise ArgumentTypeError(f"IfElse: cond must be a Variable, got "
                                    f"{type(cond).__name__}{where_at()}")
        shape = None if cond.shape is None else list(cond.shape)
        if cond.dtype != "bool" or shape is None or not (
                len(shape) == 2 and shape[1] == 1 or len(shape) == 1):
            raise ProgramError(f"IfElse: cond must be a bool [N, 1] tensor (one condition per "
                               f"row), got '{cond.name}' {cond.dtype} {shape}{where_at()}")
        if cond.lod_level:
            raise ProgramError(f"IfElse: cond '{cond.name}' is a LoD value; IfElse splits the "
                               f"rows of dense values{where_at()}")
        self.helper = named_helper("IfElse", "ifelse", name)
        self.cond = cond
        self.status = _OUT
        self.branches: dict[int, Branch] = {}
        self.outputs: dict[int, list] = {_TRUE: [], _FALSE: []}
        self.inputs: dict[int, dict[str, Variable]] = {_TRUE: {}, _FALSE: {}}
        self.sources: dict[str, Variable] = {}  # outer name -> the value split
        self.results = None

    def true_block(self):
        return _IfElseGuard(self, _TRUE)

    def false_block(self):
        return _IfElseGuard(self, _FALSE)

    def input(self, x):
        """The rows of ``x`` this block handles (a value of x's type standing for them)."""
        if self.status == _OUT:
            raise ProgramError(f"IfElse.input must be called inside true_block/false_block"
                               f"{where_at()}")
        if not isinstance(x, Variable) or x.shape is None:
            raise ProgramError(f"IfElse.input: x must be a Variable with a shape, got {x!r}"
                               f"{where_at()}")
        rows = self.cond.shape[0]
        if x.lod_level or not x.shape or x.shape[0] != rows and -1 not in (x.shape[0], rows):
            raise ProgramError(f"IfElse.input: '{x.name}' {list(x.shape)} must be a dense value "
                               f"with one row per row of cond {list(self.cond.shape)}{where_at()}")
        table = self.inputs[self.status]
        if x.name not in table:
            block = default_main_program().current_block()
            table[x.name] = block.create_var(unique_name.generate(f"{self.helper.name}.input"),
                                             list(x.shape), x.dtype)
            self.sources[x.name] = x
        return table[x.name]

    def output(self, *outs):
        if self.status == _OUT:
            raise ProgramError(f"IfElse.output can only be called inside true_block/"
                               f"false_block{where_at()}")
        for o in outs:
            if not isinstance(o, Variable):
                raise ArgumentTypeError(f"IfElse.output: outputs must be Variables, got "
                                        f"{type(o).__name__}{where_at()}")
            self.outputs[self.status].append(o)

    def __call__(self):
        if self.status != _OUT:
            raise ProgramError(f"IfElse() must be called outside its blocks{where_at()}")
        if self.results is None:
            self.results = self._build()
        return list(self.results)

    # -- the op ----------------------------------------------------------------------------
    def _build(self):
        t, f = len(self.outputs[_TRUE]), len(self.outputs[_FALSE])
        if not t and not f:
            raise ProgramError(f"IfElse: call true_block/false_block (with ie.output) before "
                               f"IfElse(){where_at()}")
        if not t or not f:
            raise ProgramError(
                f"IfElse: only the {'true' if t else 'false'} block gives outputs; its rows "
                "alone would be a data-dependent number of rows, which XLA cannot compile. Give "
                f"both blocks outputs (the merged result has every row){where_at()}")
        if t != f:
            raise ProgramError(f"IfElse: the true block gives {t} outputs but the false block "
                               f"{f}; they must give the same number{where_at()}")
        block = default_main_program().current_block()
        names = list(self.sources)
        for side in (_TRUE, _FALSE):
            branch = self.branches[side]
            for n in names:  # an input only the other block took: a stand-in of its type
                if n not in self.inputs[side]:
                    x = self.sources[n]
                    self.inputs[side][n] = block.create_var(
                        unique_name.generate(f"{self.helper.name}.input"), list(x.shape),
                        x.dtype)
            branch.placeholders = [self.inputs[side][n] for n in names]
            branch.returns = list(self.outputs[side])
            self._check_rows(block, side, branch)
        return build_region_op("IfElse", self.helper, "ifelse", {"Cond": self.cond},
                               [self.branches[_TRUE], self.branches[_FALSE]],
                               lambda x: {"true_body": x[0], "false_body": x[1]},
                               outer_inputs=[self.sources[n] for n in names])

    def _check_rows(self, block, side: int, branch: Branch) -> None:
        """Refuse ops that would mix rows, outer batch values read directly, writes to outer
        variables, and outputs not computed from the block's rows."""
        label = "true" if side == _TRUE else "false"
        reads, writes = touches(block, branch.captured)
        if writes:
            raise ProgramError(f"IfElse: the {label} block writes the outer variables "
                               f"{writes}; give results with ie.output instead{where_at()}")
        for n in reads:
            var = block.var(n)
            if not isinstance(var, Parameter) and not var.persistable and var.shape \
                    and var.shape[0] == -1:
                raise ProgramError(f"IfElse: the {label} block reads the batch value '{n}' "
                                   f"directly; take its rows with ie.input({n}){where_at()}")
        rows = {p.name for p in branch.placeholders}
        for op in branch.captured.ops:
            row_slots = {s for s, ns in op.inputs.items() if rows & set(ns)}
            if not row_slots:
                continue
            ins = {s: [block.var(n).type for n in ns] for s, ns in op.inputs.items()}
            outs = {s: [block.var(n).type for n in ns] for s, ns in op.outputs.items()}
            why = row_wise_refusal(op.type, op.attrs, row_slots, ins, outs)
            if why:
                raise ProgramError(f"IfElse: {op.where} in the {label} block would mix the rows "
                                   f"of the batch ({why}); graphc runs both blocks on every row "
                                   "and keeps each row from its own block, exact for row-wise "
                                   "ops only. Move it after IfElse(), or write the blocks with "
                                   "split_lod_tensor / merge_lod_tensor, whose sides hold "
                                   "only their own rows (docs/control_flow.md)")
            rows.update(op.output_arg_names)
        for o in branch.returns:
            if o.name not in rows:
                raise ProgramError(f"IfElse: output '{o.name}' of the {label} block is not "
                                   "computed from the rows of ie.input(): each output gives "
                                   f"one row per row the block handles{where_at()}")


class _IfElseGuard:
    def __init__(self, ie: IfElse, side: int):
        if ie.status != _OUT:
            raise ProgramError(f"IfElse: a block cannot be opened inside another{where_at()}")
        if side in ie.branches:
            raise ProgramError(f"IfElse: the {'true' if side == _TRUE else 'false'} block is "
                               f"written twice{where_at()}")
        self.ie, self.side = ie, side

    def __enter__(self):
        self.mark = BlockMark.of(default_main_program().current_block())
        self.ie.status = self.side
        return self.ie

    def __exit__(self, exc_type, exc, tb):
        captured = take(self.mark)
        self.ie.status = _OUT
        if exc_type is None:
            if not self.ie.outputs[self.side]:
                raise ProgramError(f"IfElse: the {'true' if self.side == _TRUE else 'false'} "
                                   f"block must call ie.output{where_at()}")
            self.ie.branches[self.side] = Branch(self.mark, captured)
        return False


__all__ = ["IfElse"]
