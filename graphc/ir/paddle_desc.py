"""Paddle's binary ProgramDesc (framework.proto, wire format decoded here, no protobuf
dependency) read into a graphc Program: Program.parse_from_string's binary form."""

from __future__ import annotations

import struct

from .errors import GraphcError

# VarType.Type numbers of framework.proto: the tensor element types graphc has
_DTYPES = {0: "bool", 1: "int16", 2: "int32", 3: "int64", 4: "float16", 5: "float32",
           6: "float64", 20: "uint8", 21: "int8"}
_LOD_TENSOR, _SELECTED_ROWS, _FEED_MINIBATCH, _FETCH_LIST = 7, 8, 9, 10
# OpRole bits of Paddle's op_role attribute -> graphc's op roles
_ROLES = {1: "backward", 2: "optimize", 16: "lr_sched"}


class ProgramDescError(GraphcError):
    """Bytes that are not a ProgramDesc graphc can read."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ProgramDescError("truncated or malformed varint")
        b = data[pos]
        value |= (b & 0x7F) << shift
        pos += 1
        if not b & 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes) -> dict[int, list]:
    """{field number: [values]}: ints for varints, bytes for length-delimited, raw 4/8 bytes
    for fixed32/fixed64 (what a message's parser turns into floats)."""
    out: dict[int, list] = {}
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise ProgramDescError("a length-delimited field runs past the end")
            value, pos = data[pos:pos + size], pos + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, pos = data[pos:pos + size], pos + size
        else:
            raise ProgramDescError(f"unsupported wire type {wire} (field {number})")
        out.setdefault(number, []).append(value)
    return out


def _signed(v: int, bits: int = 64) -> int:
    return v - (1 << bits) if v >= 1 << (bits - 1) else v


def _repeated_ints(values: list) -> list[int]:
    """A repeated int field, packed (bytes) or not."""
    out = []
    for v in values:
        if isinstance(v, bytes):
            pos = 0
            while pos < len(v):
                x, pos = _varint(v, pos)
                out.append(_signed(x))
        else:
            out.append(_signed(v))
    return out


def _repeated_floats(values: list) -> list[float]:
    out = []
    for v in values:
        out.extend(struct.unpack(f"<{len(v) // 4}f", v))
    return out


def _str(v: bytes) -> str:
    return v.decode("utf-8")


def _attr(f: dict) -> tuple[str, object]:
    name, kind = _str(f[1][0]), f.get(2, [0])[0]
    if kind == 0:
        return name, _signed(f.get(3, [0])[0])  # a negative int32 is sign-extended
    if kind == 1:
        return name, struct.unpack("<f", f[4][0])[0] if 4 in f else 0.0
    if kind == 2:
        return name, _str(f[5][0]) if 5 in f else ""
    if kind == 3:
        return name, _repeated_ints(f.get(6, []))
    if kind == 4:
        return name, _repeated_floats(f.get(7, []))
    if kind == 5:
        return name, [_str(s) for s in f.get(8, [])]
    if kind == 6:
        return name, bool(f.get(10, [0])[0])
    if kind == 7:
        return name, [bool(b) for b in _repeated_ints(f.get(11, []))]
    if kind == 9:
        return name, _signed(f.get(13, [0])[0])
    if kind == 11:
        return name, _repeated_ints(f.get(15, []))
    raise ProgramDescError(f"attribute '{name}' is a sub-block (type {kind}): control flow "
                           "programs are not read")


def _slots(values: list) -> dict[str, list[str]]:
    out = {}
    for raw in values:
        f = _fields(raw)
        names = [_str(a) for a in f.get(2, [])]
        if names:
            out[_str(f[1][0])] = names
    return out


def _var(raw: bytes) -> dict:
    f = _fields(raw)
    vtype = _fields(f[2][0])
    kind = vtype[1][0]
    var = {"name": _str(f[1][0]), "kind": kind, "persistable": bool(f.get(3, [0])[0])}
    desc = None
    if kind == _LOD_TENSOR and 3 in vtype:
        lod = _fields(vtype[3][0])
        desc, var["lod_level"] = _fields(lod[1][0]), lod.get(2, [0])[0]
    elif kind == _SELECTED_ROWS and 2 in vtype:
        desc = _fields(vtype[2][0])
    if desc is not None:
        dt = desc[1][0]
        if dt not in _DTYPES:
            raise ProgramDescError(f"variable '{var['name']}' has element type {dt}, "
                                   "which graphc lacks")
        var["dtype"], var["shape"] = _DTYPES[dt], _repeated_ints(desc.get(2, []))
    return var


def program_from_desc(data: bytes):
    """The Program a serialized Paddle ProgramDesc describes (its global block: feed/fetch
    ops become data variables and nothing; attributes graphc's ops lack, such as op_role,
    are dropped)."""
    from .opdef import get_op_def, has_op_def
    from .program import Program
    blocks = _fields(data).get(1, [])
    if not blocks:
        raise ProgramDescError("no blocks: not a Paddle ProgramDesc")
    if len(blocks) > 1:
        raise ProgramDescError(f"{len(blocks)} blocks: graphc reads single-block programs "
                               "(no control flow) from Paddle's binary form")
    bf = _fields(blocks[0])
    variables = {v["name"]: v for v in map(_var, bf.get(3, []))}
    ops = [_fields(raw) for raw in bf.get(4, [])]
    feeds = {n for op in ops if _str(op[3][0]) == "feed" for n in _slots(op.get(2, [])).get(
        "Out", [])}
    program = Program()
    block = program.global_block()
    for name, v in variables.items():
        if v["kind"] in (_FEED_MINIBATCH, _FETCH_LIST):
            continue
        if "shape" not in v:
            raise ProgramDescError(f"variable '{name}' is of VarType {v['kind']}, which "
                                   "graphc does not read")
        block.create_var(name, v["shape"], v["dtype"], persistable=v["persistable"],
                         lod_level=v.get("lod_level", 0), is_data=name in feeds,
                         need_check_feed=name in feeds,
                         selected_rows=v["kind"] == _SELECTED_ROWS)
    for op in ops:
        op_type = _str(op[3][0])
        if op_type in ("feed", "fetch"):
            continue
        if not has_op_def(op_type):
            raise ProgramDescError(f"op '{op_type}' has no graphc definition")
        known = get_op_def(op_type).attrs
        attrs = dict(_attr(_fields(a)) for a in op.get(4, []))
        role = _ROLES.get(int(attrs.get("op_role", 0)) & 0xFF, "forward")
        kept = {k: v for k, v in attrs.items() if k in known}
        with program.op_role_guard(role):
            block.append_op(op_type, _slots(op.get(1, [])), _slots(op.get(2, [])), kept)
    return program
