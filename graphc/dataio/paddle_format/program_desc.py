"""Paddle's ProgramDesc (``__model__``) to a graphc Program and back through schema.py's
protobuf schema: feed/fetch ops <-> data variables and fetch names; op_role & co dropped."""

from __future__ import annotations

from ...ir import program_serial
from ...ir.errors import GraphcError, ProgramError
from ...ir.opdef import get_op_def, has_op_def
from ...ir.program import Program
from . import cf_read
from .schema import ATTR_TYPES, VAR_TYPES, messages
from .tensor_stream import DTYPE_NAMES, DTYPE_NUMBERS

# OpRole bits of Paddle's op_role attribute <-> graphc's op roles
_ROLES = {1: "backward", 2: "optimize", 16: "lr_sched"}
_ROLE_NUMBERS = {"forward": 0, "backward": 1, "optimize": 2, "lr_sched": 16}
# Paddle's bookkeeping attributes, never an op's own
_DROPPED = frozenset({"op_role", "op_role_var", "op_namescope", "op_callstack", "op_device",
                      "with_quant_attr"})
_T = ATTR_TYPES
# graphc AttrDef type -> (AttrType, field) written for it
_WRITE = {"bool": (_T["BOOLEAN"], "b"), "int": (_T["INT"], "i"), "float": (_T["FLOAT"], "f"),
          "str": (_T["STRING"], "s"), "dtype": (_T["INT"], "i"),
          "ints": (_T["INTS"], "ints"), "floats": (_T["FLOATS"], "floats"),
          "strs": (_T["STRINGS"], "strings")}
# AttrType -> field holding the value (the types graphc reads)
_READ = {_T["INT"]: "i", _T["FLOAT"]: "f", _T["STRING"]: "s", _T["INTS"]: "ints",
         _T["FLOATS"]: "floats", _T["STRINGS"]: "strings", _T["BOOLEAN"]: "b",
         _T["BOOLEANS"]: "bools", _T["LONG"]: "l", _T["LONGS"]: "longs",
         _T["FLOAT64"]: "float64", _T["FLOAT64S"]: "float64s"}
_INT32 = (-(1 << 31), (1 << 31) - 1)
_LOD_TENSOR, _SELECTED_ROWS = VAR_TYPES["LOD_TENSOR"], VAR_TYPES["SELECTED_ROWS"]
_FEED, _FETCH = VAR_TYPES["FEED_MINIBATCH"], VAR_TYPES["FETCH_LIST"]
_ARRAY, _STEP_SCOPES = VAR_TYPES["LOD_TENSOR_ARRAY"], VAR_TYPES["STEP_SCOPES"]
# control-flow ops whose sub-block graphc reads (into a region op, docs/control_flow.md)
_REGION_OPS = frozenset({"while", "conditional_block", "recurrent"})
_TYPE_NAMES = {number: name for name, number in VAR_TYPES.items()}


class ProgramDescError(ProgramError):
    """A ProgramDesc graphc cannot read: malformed bytes, an op graphc lacks, control flow."""


class NoPaddleFormError(ProgramDescError):
    """A program graphc cannot write as a ProgramDesc: an op with regions (DynamicRNN,
    IfElse) that Paddle expresses with ops graphc does not emit."""


def parse(data: bytes, where: str = "ProgramDesc"):
    """The ProgramDesc message of ``data``; ``where`` (a file name) heads the error."""
    desc = messages().ProgramDesc()
    from google.protobuf.message import DecodeError, EncodeError  # loaded by messages()
    try:
        desc.ParseFromString(bytes(data))
    except (DecodeError, EncodeError, ValueError) as exc:
        raise ProgramDescError(f"{where}: not a Paddle ProgramDesc (truncated or corrupted: "
                               f"{exc})") from None
    if not desc.blocks:
        raise ProgramDescError(f"{where}: no blocks: not a Paddle ProgramDesc")
    return desc


def _attr_value(attr, where: str):
    field = _READ.get(attr.type)
    if field is None:
        kind = next((k for k, v in ATTR_TYPES.items() if v == attr.type), attr.type)
        extra = (": graphc reads the sub-blocks of while, conditional_block and recurrent "
                 "only" if kind in ("BLOCK", "BLOCKS") else "")
        raise ProgramDescError(f"{where}: attribute '{attr.name}' is of type {kind}, which "
                               f"graphc does not read{extra}")
    value = getattr(attr, field)
    return list(value) if field in ("ints", "floats", "strings", "bools", "longs",
                                    "float64s") else value


def _attrs(op, opdef, where: str) -> dict:
    out = {}
    for attr in op.attrs:
        if attr.name in _DROPPED or attr.name not in opdef.attrs:
            continue  # Paddle-only attributes (use_mkldnn, ...) graphc's op does not have
        value = _attr_value(attr, f"{where}, op '{op.type}'")
        if opdef.attrs[attr.name].type == "dtype" and isinstance(value, int):
            if value not in DTYPE_NAMES:
                raise ProgramDescError(f"{where}: op '{op.type}' attribute '{attr.name}' is "
                                       f"element type {value}, which graphc lacks")
            value = DTYPE_NAMES[value]
        out[attr.name] = value
    return out


def _slots(vars_) -> dict[str, list[str]]:
    return {v.parameter: list(v.arguments) for v in vars_ if v.arguments}


def _create_var(block, var, feeds: set, where: str, name: str | None = None) -> None:
    """``var`` (a VarDesc) in graphc's ``block``, under ``name`` when given."""
    kind, vname = var.type.type, name or var.name
    if kind == _STEP_SCOPES:  # a while op's step scopes: graphc's loops keep none
        return
    if kind == _ARRAY:  # a tensor array: typed by its first write, as create_array's
        tensor = var.type.tensor_array.tensor
        if tensor.data_type not in DTYPE_NAMES:
            raise ProgramDescError(f"{where}: tensor array '{vname}' has element type "
                                   f"{_TYPE_NAMES.get(tensor.data_type, tensor.data_type)}, "
                                   "which graphc lacks")
        block.create_var(vname, None, DTYPE_NAMES[tensor.data_type]).is_array = True
        return
    if kind == _LOD_TENSOR:
        tensor, lod_level = var.type.lod_tensor.tensor, var.type.lod_tensor.lod_level
    elif kind == _SELECTED_ROWS:
        tensor, lod_level = var.type.selected_rows, 0
    else:
        raise ProgramDescError(f"{where}: variable '{vname}' is a "
                               f"{_TYPE_NAMES.get(kind, kind)}, which graphc does not read")
    if tensor.data_type not in DTYPE_NAMES:
        tname = _TYPE_NAMES.get(tensor.data_type, tensor.data_type)
        raise ProgramDescError(f"{where}: variable '{vname}' has element type {tname}, "
                               "which graphc lacks")
    shape, dtype = list(tensor.dims), DTYPE_NAMES[tensor.data_type]
    if var.is_parameter and var.persistable and all(d >= 0 for d in shape):
        block.create_parameter(vname, shape, dtype, trainable=not var.stop_gradient)
        return
    is_data = vname in feeds
    block.create_var(vname, shape, dtype, persistable=var.persistable,
                     stop_gradient=var.stop_gradient, lod_level=lod_level, is_data=is_data,
                     need_check_feed=is_data or var.need_check_feed,
                     selected_rows=kind == _SELECTED_ROWS)


def to_program(data: bytes, where: str = "ProgramDesc") -> tuple[Program, list[str], list[str]]:
    """(program, feed names by ``col``, fetch names by ``col``) of a serialized ProgramDesc:
    its global block, feed/fetch ops replaced by data variables and fetch names."""
    desc = parse(data, where)
    cf_read.mark_ifelse_rows(desc)  # ifelse26
    holders = {op.type for b in desc.blocks for op in b.ops
               if any(a.type in (_T["BLOCK"], _T["BLOCKS"]) for a in op.attrs)}
    held = {a.block_idx for b in desc.blocks for op in b.ops for a in op.attrs
            if a.type == _T["BLOCK"]}
    loose = sorted(set(range(1, len(desc.blocks))) - held)
    if loose:
        raise ProgramDescError(f"{where}: {len(desc.blocks)} blocks (control flow: block(s) "
                               f"{loose} held by no op); not a program graphc can read")
    if holders - _REGION_OPS:
        raise ProgramDescError(f"{where}: control flow {sorted(holders - _REGION_OPS)} (ops "
                               "holding sub-blocks) is not read from Paddle's format yet; "
                               f"graphc reads {sorted(_REGION_OPS)}")
    ops = desc.blocks[0].ops
    feeds, fetches = {}, {}
    for op in ops:
        if op.type in ("feed", "fetch"):
            col = next((a.i for a in op.attrs if a.name == "col"), 0)
            slot = _slots(op.outputs if op.type == "feed" else op.inputs)
            names = slot.get("Out" if op.type == "feed" else "X", [])
            (feeds if op.type == "feed" else fetches)[col] = names[0] if names else ""
    unknown = sorted({op.type for b in desc.blocks for op in b.ops if op.type not in (
        "feed", "fetch") and op.type not in cf_read.TRANSLATED and not has_op_def(op.type)})
    if unknown:
        raise ProgramDescError(f"{where}: op(s) {unknown} have no graphc definition; graphc "
                               "cannot run this program")
    program = Program()
    block = program.global_block()
    plan = cf_read.plan(ops, where)
    for var in desc.blocks[0].vars:
        if var.type.type not in (_FEED, _FETCH) and var.name not in plan.deferred:
            _create_var(block, var, set(feeds.values()), where)
    from ...ir.default_programs import program_guard
    with program_guard(program, Program()):  # control flow builds through the layers
        _append_ops(desc, program, ops, set(feeds.values()), where, {}, plan)
    return (program, [feeds[c] for c in sorted(feeds)], [fetches[c] for c in sorted(fetches)])


def _renamed(slots: dict, rename: dict) -> dict:
    return {s: [rename.get(n, n) for n in names] for s, names in slots.items()}


def _append_ops(desc, program, ops, feeds: set, where: str, rename: dict | None = None,
                plan=None) -> None:
    """``ops`` (OpDescs) appended to graphc's block; ``rename`` maps Paddle's names to graphc's
    inside a recurrent step (its rnn_memory_helper copies extend it); ``plan``: cf_read's."""
    block, rename = program.global_block(), {} if rename is None else rename
    plan = plan or cf_read.plan(ops, where)
    ctx = (desc, program, feeds, where)
    for i, op in enumerate(ops):
        if op.type in ("feed", "fetch") or i in plan.select_of:
            continue  # a group's select_inputs are assigned where the group is built
        if op.type == "while":
            _append_while(desc, program, op, feeds, where, rename)
            continue
        if op.type == "conditional_block":
            if i in plan.groups:
                cf_read.append_group(ctx, ops, plan.groups[i], plan, rename)
            elif i not in plan.member:
                cf_read.append_conditional(ctx, op, rename)
            continue
        if op.type == "recurrent":
            cf_read.append_recurrent(ctx, op, rename)
            continue
        if op.type == "rnn_memory_helper":  # a step's copy of a value: the same value
            (src,), (dst,) = _slots(op.inputs)["X"], _slots(op.outputs)["Out"]
            rename[dst] = rename.get(src, src)
            continue
        opdef = get_op_def(op.type)
        role_bits = next((a.i for a in op.attrs if a.name == "op_role"), 0)
        inputs = _renamed(_slots(op.inputs), rename)
        outputs = _renamed(_slots(op.outputs), rename)
        if op.type == "read_from_array":  # a read declared a LoD value: a mixed array
            _promote_for_read(block, inputs["X"][0], outputs["Out"][0], where)
        if op.type == "write_to_array":  # Paddle writes the array in place: graphc's op
            out = block.var(outputs["Out"][0])  # takes its value before
            if out.shape is not None:
                from ...layers import array_mix
                x = block._find_var(inputs["X"][0])
                if x is not None and array_mix.mixes(out, x):  # dense rows, then LoD values
                    array_mix.promote(block, out, x.lod_level, where)
                inputs["Array"] = [out.name]
        try:
            with program.op_role_guard(_ROLES.get(role_bits & 0xFF, "forward")):
                block.append_op(op.type, inputs, outputs, _attrs(op, opdef, where))
        except ProgramDescError:
            raise
        except GraphcError as exc:
            raise ProgramDescError(f"{where}: op #{i} '{op.type}' does not build in graphc: "
                                   f"{exc}") from None


def _promote_for_read(block, array: str, out: str, where: str) -> None:
    """A read whose output the file declares a LoD value, of an array whose elements are
    dense so far: graphc saved an array mixing dense rows and LoD values (its later LoD
    writes come after this read), so the array holds LoD values from here on."""
    from ...layers import array_mix
    a, o = block._find_var(array), block._find_var(out)
    if a is not None and a.shape is not None and a.is_array and not a.element_lod and \
            o is not None and o.shape is not None and o.lod_level:
        array_mix.promote(block, a, o.lod_level, where)


def _append_while(desc, program, op, feeds: set, where: str, rename: dict) -> None:
    """Paddle's while op and its sub-block, rebuilt as graphc's While builds it: the
    sub-block's ops become the loop's body region (its variables local to it)."""
    from ...layers.control_flow import While
    block = program.global_block()
    index = next(a.block_idx for a in op.attrs if a.name == "sub_block")
    (cond_name,) = _slots(op.inputs)["Condition"]
    cond = block.var(rename.get(cond_name, cond_name))
    try:
        loop = While(cond)
        with loop.block():
            cf_read.append_block((desc, program, feeds, where), index, rename)
    except ProgramDescError:
        raise
    except GraphcError as exc:
        raise ProgramDescError(f"{where}: the while loop of block {index} does not build in "
                               f"graphc: {exc}") from None


def _set_tensor(desc, var) -> None:
    desc.data_type = DTYPE_NUMBERS[var.dtype]
    desc.dims.extend(list(var.shape or ()))


def _var_desc(block_desc, var) -> None:
    v = block_desc.vars.add(name=var.name, persistable=bool(var.persistable))
    if var.dtype not in DTYPE_NUMBERS:
        raise ProgramDescError(f"variable '{var.name}' is {var.dtype}, which Paddle's "
                               "ProgramDesc cannot hold")
    if var.is_array:  # a tensor array: its element's type (Paddle's arrays are unsized)
        v.type.type = _ARRAY
        v.type.tensor_array.tensor.data_type = DTYPE_NUMBERS[var.dtype]
        v.type.tensor_array.tensor.dims.extend(list((var.shape or (0,))[1:]))
    elif var.selected_rows:
        v.type.type = _SELECTED_ROWS
        _set_tensor(v.type.selected_rows, var)
    else:
        v.type.type = _LOD_TENSOR
        _set_tensor(v.type.lod_tensor.tensor, var)
        if var.lod_level:
            v.type.lod_tensor.lod_level = int(var.lod_level)
    if var.is_data or var.need_check_feed:
        v.need_check_feed = True
    if var.is_parameter:
        v.is_parameter = True
    if var.stop_gradient:
        v.stop_gradient = True


def _attr_desc(op_desc, name: str, kind: str, value, where: str) -> None:
    attr_type, field = _WRITE[kind]
    if kind == "dtype":
        value = DTYPE_NUMBERS[str(value)]
    if attr_type == _T["INT"] and not _INT32[0] <= value <= _INT32[1]:
        attr_type, field = _T["LONG"], "l"
    if attr_type == _T["INTS"] and any(not _INT32[0] <= v <= _INT32[1] for v in value):
        attr_type, field = _T["LONGS"], "longs"
    attr = op_desc.attrs.add(name=name, type=attr_type)
    if isinstance(value, list | tuple):
        getattr(attr, field).extend(value)
    else:
        setattr(attr, field, value)


def _op_desc(block_desc, type_, inputs, outputs, attrs) -> object:
    op = block_desc.ops.add(type=type_)
    for slots, dest in ((inputs, op.inputs), (outputs, op.outputs)):
        for slot, names in slots.items():
            dest.add(parameter=slot, arguments=list(names))
    return op


def from_program(program: Program, feeds: list[str], fetches: list[str]) -> bytes:
    """The serialized ProgramDesc of ``program``'s global block with Paddle's feed and fetch
    ops (``col`` i for the i-th name) around its ops, as save_inference_model writes it."""
    m = messages()
    desc = m.ProgramDesc()
    block = program.global_block()
    if program.num_blocks > 1:
        raise ProgramDescError("the program has sub-blocks (control flow), which graphc does "
                               "not write in Paddle's format")
    bd = desc.blocks.add(idx=0, parent_idx=-1)
    for var in block.vars.values():
        _var_desc(bd, var)
    for name, kind in (("feed", _FEED), ("fetch", _FETCH)):
        bd.vars.add(name=name, persistable=True).type.type = kind
    for i, name in reversed(list(enumerate(feeds))):  # Paddle prepends them one by one
        op = _op_desc(bd, "feed", {"X": ["feed"]}, {"Out": [name]}, {})
        op.attrs.add(name="col", type=_T["INT"], i=i)
    _write_ops(desc, bd, block.ops)
    for i, name in enumerate(fetches):
        op = _op_desc(bd, "fetch", {"X": [name]}, {"Out": ["fetch"]}, {})
        op.attrs.add(name="col", type=_T["INT"], i=i)
    return desc.SerializeToString()


def _write_ops(desc, bd, ops) -> None:
    from . import cf_write
    empty: set[str] = set()  # arrays no op writes yet (Paddle's: the first write makes one)
    for op in ops:
        if op.type == "while":
            _write_while(desc, bd, op, empty)
            continue
        if op.type in ("cond", "case", "switch_case"):
            cf_write.write_branches(desc, bd, op, _write_ops)
            continue
        if op.type == "recurrent":
            cf_write.write_recurrent(desc, bd, op, _write_ops)
            continue
        if op.type == "ifelse":  # ifelse26
            cf_write.write_ifelse(desc, bd, op, _write_ops)
            continue
        if op.type == "empty_array":
            empty.update(op.output("Out"))
            continue
        if get_op_def(op.type).regions:
            raise NoPaddleFormError(
                f"{op.where}: '{op.type}' has no form in Paddle's format that graphc writes: "
                "graphc writes while, cond, case, switch_case, ifelse and recurrent "
                "(StaticRNN)")
        inputs = dict(op.inputs)
        if op.type == "write_to_array":  # Paddle's op writes its array in place
            inputs.pop("Array", None)
        _write_op(bd, op.type, inputs, op.outputs, op.all_attrs(), getattr(op, "role", None))


def _write_op(bd, type_, inputs, outputs, attrs, role) -> None:
    opdef = get_op_def(type_)
    od = _op_desc(bd, type_, inputs, outputs, {})
    for name, value in sorted(attrs.items()):
        if name in opdef.attrs and value is not None:
            _attr_desc(od, name, opdef.attrs[name].type, value, type_)
    od.attrs.add(name="op_role", type=_T["INT"], i=_ROLE_NUMBERS.get(role or "forward", 0))


def _write_while(desc, bd, op, empty: set) -> None:
    """graphc's while op as Paddle's: its body a sub-block whose ops write the carried
    variables in place (the body's values named by their variables), the carried values
    first copied into the variables the loop writes (Paddle's while has one name for both)."""
    from ...ir.graph import Graph
    from ...ir.to_program import graph_to_program
    from ...ops.scan.defs import body_graph
    ins = {s: list(v) for s, v in op.inputs.items()}
    outs = {s: list(v) for s, v in op.outputs.items()}
    carried_in = ins.get("Carry", []) + ins.get("Aux", [])
    carried_out = outs.get("Out", []) + outs.get("AuxOut", [])
    for src, dst in zip(carried_in, carried_out):
        if src != dst and src not in empty:
            _write_op(bd, "assign", {"X": [src]}, {"Out": [dst]}, {}, op.role)
    body: Graph = body_graph(op.attrs["body"])
    sub_program = graph_to_program(body)  # SSA versions back to their variables' names
    sub_block = sub_program.global_block()
    index = len(desc.blocks)
    sd = desc.blocks.add(idx=index, parent_idx=bd.idx)
    from .cf_write import _visible
    outer = _visible(desc, bd)  # a loop inside a branch sees the blocks around it too
    inputs = [v.var.name for v in body.inputs]
    for var in sub_block.vars.values():
        if var.name not in outer and var.name not in inputs:
            _var_desc(sd, var)
    _write_ops(desc, sd, sub_block.ops)
    # the body's outputs are its carried variables: their last values must carry those names
    for v, name in zip(body.outputs, inputs[:len(carried_out)]):
        if v.var.name != name:
            raise ProgramDescError(f"{op.where}: the loop body's result {v.name} is not "
                                   f"variable '{name}': not writable as Paddle's in-place loop")
    scopes = f"_step_scopes_{index}"
    bd.vars.add(name=scopes).type.type = _STEP_SCOPES
    cond = carried_out[len(outs.get("Out", [])) + op.attrs["cond_index"]]
    wd = _op_desc(bd, "while", {"X": inputs, "Condition": [cond]},
                  {"Out": carried_out, "StepScopes": [scopes]}, {})
    wd.attrs.add(name="sub_block", type=_T["BLOCK"], block_idx=index)
    wd.attrs.add(name="is_test", type=_T["BOOLEAN"], b=False)
    wd.attrs.add(name="op_role", type=_T["INT"], i=_ROLE_NUMBERS.get(op.role or "forward", 0))


def _parse_from_string(data: bytes) -> Program:
    return to_program(data, "Program.parse_from_string")[0]


# field 1 (blocks), length-delimited: the first byte of every ProgramDesc
program_serial.BINARY_READERS[b"\x0a"] = _parse_from_string
program_serial.BINARY_WRITERS["ProgramDesc"] = lambda program: from_program(program, [], [])
