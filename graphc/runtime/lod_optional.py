"""A LoD fed to a variable declared dense that only ops reading an optional LoD take (rank1):
reorder_lod_tensor_by_rank, split/merge_lod_tensor use the fed LoD, as Paddle runs them."""

from __future__ import annotations

from ..ir.retype import ReinferError, lod_only, reinfer

# op type -> the slots whose LoD it uses when one is fed and whose rows it takes otherwise
LOD_OPTIONAL = {
    "reorder_lod_tensor_by_rank": ("X",),
    "split_lod_tensor": ("X",),
    "merge_lod_tensor": ("X", "InTrue", "InFalse"),
    "merge_lod_tensor_infer": ("X", "InTrue", "InFalse"),
}


def _reads_lod(op, name: str) -> bool | None:
    """True where ``op`` reads ``name`` in a slot of an optional LoD, None where it is a
    gradient op (it reads what its forward op read), False for any other reading."""
    if op.type.endswith("_grad"):
        return None
    slots = LOD_OPTIONAL.get(op.type, ())
    return all(slot in slots for slot, names in op.inputs.items() if name in names)


def optional_lod_level(program, var, level: int) -> int:
    """``level`` when a LoD of ``level`` levels fed to ``var`` (declared dense) is to be kept:
    ops read ``var`` only where Paddle uses an optional LoD (at least one does) and every op
    computed from it still infers with the LoD, keeping its shape and dtype; else 0 (the LoD
    is dropped and the rows run, as for any variable declared without one: a dense reading
    beside them, a concat with dense features, would mix LoD buffers with plain rows)."""
    # (asked on every run that feeds a LoD to a variable declared dense: answered once per
    # program version, variable and level, as the re-typed copies are cached)
    answers = program.__dict__.setdefault("_lod_optional", {})
    key = (program.version, var.name, level)
    if key not in answers:
        if len(answers) >= 64:
            answers.clear()
        answers[key] = _optional_level(program, var, level)
    return answers[key]


def _optional_level(program, var, level: int) -> int:
    block = program.global_block()
    if level < 1 or any(b.ops for b in program.blocks[1:]) or not var.shape or \
            var.shape[0] != -1 or var.is_array:
        return 0
    reads = [_reads_lod(op, var.name) for op in block.ops if var.name in op.input_arg_names]
    if not any(reads) or False in reads:
        return 0
    try:
        reinfer(program, {var.name: var.type._replace(lod_level=level)}, keep=lod_only)
    except ReinferError:
        return 0
    return level
