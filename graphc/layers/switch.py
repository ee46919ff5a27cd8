"""Paddle's ConditionalBlock and Switch: ``with`` blocks whose ops run only when their condition
holds, built as one ``cond`` / ``case`` op (ops/cond/) whose outer writes are carried."""

from __future__ import annotations

from ..ir.default_programs import default_main_program
from ..ir.errors import ProgramError
from ..ir.program import Variable
from ..ir.regions import BlockMark, Captured, take
from .conditional import (
    Branch,
    build_region_op,
    check_scalar,
    drop_branch_locals,
    named_helper,
    touches,
    where_at,
)


class ConditionalBlock:
    """``with ConditionalBlock([cond], is_scalar_condition=True).block():`` the ops run only
    when ``cond`` (a bool of one element) is true; without ``is_scalar_condition``, only when
    every input has elements. Outer variables written inside are carried (one ``cond`` op
    whose false branch keeps them)."""

    def __init__(self, inputs, is_scalar_condition=False, name=None):
        inputs = list(inputs) if isinstance(inputs, list | tuple) else [inputs]
        for x in inputs:
            if not isinstance(x, Variable):
                raise ProgramError(f"ConditionalBlock: inputs must be Variables, got "
                                   f"{type(x).__name__}{where_at()}")
        if is_scalar_condition:
            if len(inputs) != 1:
                raise ProgramError(f"ConditionalBlock: a scalar condition is one bool, got "
                                   f"{len(inputs)} inputs{where_at()}")
            check_scalar("ConditionalBlock", "the condition", inputs[0])
        elif not inputs:
            raise ProgramError(f"ConditionalBlock: inputs is empty{where_at()}")
        self.inputs, self.is_scalar_condition = inputs, is_scalar_condition
        self.helper = named_helper("ConditionalBlock", "conditional_block", name)

    def block(self):
        return _ConditionalGuard(self)

    def _predicate(self):
        if self.is_scalar_condition:
            return self.inputs[0]
        from .creation import is_empty
        from .logic import logical_and, logical_not
        pred = None
        for x in self.inputs:  # Paddle's rule: run when no input is empty
            full = logical_not(is_empty(x))
            pred = full if pred is None else logical_and(pred, full)
        return pred

    def _finish(self, branch: Branch) -> None:
        block = default_main_program().current_block()
        if not self.is_scalar_condition and _split_masks(block, self.inputs):
            # ifelse26: a side of Paddle 1.8's IfElse written by hand (split_lod_tensor, a
            # ConditionalBlock([mask]) per side, merge_lod_tensor): Paddle runs it whenever the
            # mask has rows, i.e. in every step, on the side's LoD value; its ops stay as they are
            block.ops.extend(branch.captured.ops)
            block.program._bump()
            return
        _, writes = touches(block, branch.captured)
        if not writes:  # only local values: nothing outside can tell whether it ran
            drop_branch_locals(block, branch)
            return
        keep = Branch(BlockMark.of(block), Captured([], [], [], set()))
        build_region_op("ConditionalBlock", self.helper, "cond",
                        {"Cond": self._predicate()}, [branch, keep],
                        lambda t: {"true_body": t[0], "false_body": t[1]})



def _split_masks(block, inputs) -> bool:
    """Whether every input is the Mask of a split_lod_tensor of ``block``."""
    masks = {n for op in block.ops if op.type == "split_lod_tensor" for n in op.input("Mask")}
    return bool(inputs) and all(x.name in masks for x in inputs)

class _ConditionalGuard:
    def __init__(self, owner):
        self.owner = owner

    def __enter__(self):
        self.mark = BlockMark.of(default_main_program().current_block())
        return self.owner

    def __exit__(self, exc_type, exc, tb):
        captured = take(self.mark)
        if exc_type is None:
            self.owner._finish(Branch(self.mark, captured))
        return False


class Switch:
    """``with Switch() as switch:`` then ``with switch.case(cond):`` blocks and an optional
    ``with switch.default():``: only the first case whose cond is true runs (else the
    default); outer variables assigned inside are updated only by the branch taken. One
    ``case`` op, appended when the Switch closes."""

    def __init__(self, name=None):
        self.helper = named_helper("Switch", "switch", name)
        self.inside = False
        self.cases: list = []  # (condition, Branch)
        self.default_branch: Branch | None = None

    def __enter__(self):
        self.inside = True
        self.mark = BlockMark.of(default_main_program().current_block())
        return self

    def case(self, condition):
        if not self.inside:
            raise ProgramError(f"Switch.case must be called inside 'with Switch()'{where_at()}")
        if self.default_branch is not None:
            raise ProgramError(f"Switch.case after Switch.default{where_at()}")
        check_scalar("Switch.case", "condition", condition)
        return _SwitchGuard(self, condition)

    def default(self):
        if not self.inside:
            raise ProgramError(f"Switch.default must be called inside 'with Switch()'{where_at()}")
        if not self.cases:
            raise ProgramError(f"Switch.default: there should be at least one case before "
                               f"it{where_at()}")
        return _SwitchGuard(self, None)

    def __exit__(self, exc_type, exc, tb):
        self.inside = False
        if exc_type is not None:
            return False
        if not self.cases:
            return False
        block = self.mark.block
        branches = [b for _, b in self.cases]
        branches.append(self.default_branch or Branch(BlockMark.of(block),
                                                      Captured([], [], [], set())))
        written = {n for b in branches for n in touches(block, b.captured)[1]}
        if not written:
            for b in branches:
                drop_branch_locals(block, b)
            return False
        # the op is appended when the Switch closes: what ran between its cases must not
        # have read what a case writes
        for op in block.ops[self.mark.start:]:
            late = written & set(op.input_arg_names)
            if late:
                raise ProgramError(f"Switch: {op.where} reads {sorted(late)} between the "
                                   "Switch's cases, which write it; read it after the Switch")
        build_region_op("Switch", self.helper, "case",
                        {"Conds": [c for c, _ in self.cases]}, branches,
                        lambda t: {"branches": t})
        return False


class _SwitchGuard:
    def __init__(self, switch: Switch, condition):
        self.switch, self.condition = switch, condition

    def __enter__(self):
        self.mark = BlockMark.of(default_main_program().current_block())

    def __exit__(self, exc_type, exc, tb):
        captured = take(self.mark)
        if exc_type is None:
            branch = Branch(self.mark, captured)
            if self.condition is None:
                self.switch.default_branch = branch
            else:
                self.switch.cases.append((self.condition, branch))
        return False


__all__ = ["ConditionalBlock", "Switch"]
