"""Paddle's framework.proto (the messages a saved model uses), declared through protobuf's own
descriptors; ``messages()`` gives the message classes (ProgramDesc, VarType, ...)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from google.protobuf import descriptor_pb2

PACKAGE = "paddle.framework.proto"

# AttrType and VarType.Type numbers (Paddle 1.8's names; 2.x/3.x added the later numbers and
# renamed LOD_TENSOR to DENSE_TENSOR without changing the wire)
ATTR_TYPES = {"INT": 0, "FLOAT": 1, "STRING": 2, "INTS": 3, "FLOATS": 4, "STRINGS": 5,
              "BOOLEAN": 6, "BOOLEANS": 7, "BLOCK": 8, "LONG": 9, "BLOCKS": 10, "LONGS": 11,
              "FLOAT64S": 12, "VAR": 13, "VARS": 14, "FLOAT64": 15, "SCALAR": 16,
              "SCALARS": 17}
VAR_TYPES = {"BOOL": 0, "INT16": 1, "INT32": 2, "INT64": 3, "FP16": 4, "FP32": 5, "FP64": 6,
             "LOD_TENSOR": 7, "SELECTED_ROWS": 8, "FEED_MINIBATCH": 9, "FETCH_LIST": 10,
             "STEP_SCOPES": 11, "LOD_RANK_TABLE": 12, "LOD_TENSOR_ARRAY": 13,
             "PLACE_LIST": 14, "READER": 15, "FETCH_VAR_LIST": 16, "RAW": 17, "TUPLE": 18,
             "SIZE_T": 19, "UINT8": 20, "INT8": 21, "BF16": 22, "COMPLEX64": 23,
             "COMPLEX128": 24, "STRING": 25, "STRINGS": 26, "VOCAB": 27, "FEED_LIST": 28,
             "PSTRING": 29, "SPARSE_COO": 30, "SPARSE_CSR": 31, "FP8_E4M3FN": 32,
             "FP8_E5M2": 33, "UINT16": 36, "UINT32": 37, "UINT64": 38}


# protobuf (~0.1 s to import) loads with the first message built, not with graphc
def _field_proto():
    from google.protobuf import descriptor_pb2
    return descriptor_pb2.FieldDescriptorProto


def _enum(parent, name: str, values: dict[str, int]) -> None:
    enum = parent.enum_type.add(name=name)
    for key, number in values.items():
        enum.value.add(name=key, number=number)


def _message(parent, name: str, fields) -> descriptor_pb2.DescriptorProto:
    """A message of ``fields``: (name, number, label, type) with type a scalar name or the
    full name of a message or enum (``.E`` prefix for enums); an optional 5th item is the
    default's text."""
    _F = _field_proto()
    scalars = {"int32": _F.TYPE_INT32, "int64": _F.TYPE_INT64, "float": _F.TYPE_FLOAT,
               "double": _F.TYPE_DOUBLE, "string": _F.TYPE_STRING, "bool": _F.TYPE_BOOL}
    msg = parent.message_type.add(name=name) if hasattr(parent, "message_type") \
        else parent.nested_type.add(name=name)
    for item in fields:
        fname, number, label, ftype = item[:4]
        field = msg.field.add(name=fname, number=number, label=label)
        if ftype in scalars:
            field.type = scalars[ftype]
        elif ftype.startswith("E"):
            field.type, field.type_name = _F.TYPE_ENUM, f".{PACKAGE}.{ftype[1:]}"
        else:
            field.type, field.type_name = _F.TYPE_MESSAGE, f".{PACKAGE}.{ftype}"
        if len(item) > 4:
            field.default_value = item[4]
    return msg


def _file() -> descriptor_pb2.FileDescriptorProto:
    from google.protobuf import descriptor_pb2
    _F = descriptor_pb2.FieldDescriptorProto
    _OPT, _REQ, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REQUIRED, _F.LABEL_REPEATED
    f = descriptor_pb2.FileDescriptorProto(name="graphc_paddle_framework.proto",
                                           package=PACKAGE, syntax="proto2")
    _enum(f, "AttrType", ATTR_TYPES)
    _message(f, "Version", [("version", 1, _OPT, "int64", "0")])
    _message(f, "Complex", [("r", 1, _REQ, "double"), ("i", 2, _REQ, "double")])
    scalar = _message(f, "Scalar", [("type", 1, _REQ, "EScalar.Type"), ("b", 2, _OPT, "bool"),
                                    ("i", 3, _OPT, "int64"), ("r", 4, _OPT, "double"),
                                    ("c", 5, _OPT, "Complex")])
    _enum(scalar, "Type", {"BOOLEAN": 1, "LONG": 2, "FLOAT64": 3, "COMPLEX128": 4})
    op = _message(f, "OpDesc", [
        ("inputs", 1, _REP, "OpDesc.Var"), ("outputs", 2, _REP, "OpDesc.Var"),
        ("type", 3, _REQ, "string"), ("attrs", 4, _REP, "OpDesc.Attr"),
        ("is_target", 5, _OPT, "bool", "false")])
    _message(op, "Attr", [
        ("name", 1, _REQ, "string"), ("type", 2, _REQ, "EAttrType"), ("i", 3, _OPT, "int32"),
        ("f", 4, _OPT, "float"), ("s", 5, _OPT, "string"), ("ints", 6, _REP, "int32"),
        ("floats", 7, _REP, "float"), ("strings", 8, _REP, "string"), ("b", 10, _OPT, "bool"),
        ("bools", 11, _REP, "bool"), ("block_idx", 12, _OPT, "int32"), ("l", 13, _OPT, "int64"),
        ("blocks_idx", 14, _REP, "int32"), ("longs", 15, _REP, "int64"),
        ("float64s", 16, _REP, "double"), ("var_name", 17, _OPT, "string"),
        ("vars_name", 18, _REP, "string"), ("float64", 19, _OPT, "double"),
        ("scalar", 20, _OPT, "Scalar"), ("scalars", 21, _REP, "Scalar")])
    _message(op, "Var", [("parameter", 1, _REQ, "string"), ("arguments", 2, _REP, "string")])
    vt = _message(f, "VarType", [
        ("type", 1, _REQ, "EVarType.Type"), ("selected_rows", 2, _OPT, "VarType.TensorDesc"),
        ("lod_tensor", 3, _OPT, "VarType.LoDTensorDesc"),
        ("tensor_array", 4, _OPT, "VarType.LoDTensorDesc"),
        ("reader", 5, _OPT, "VarType.ReaderDesc"), ("tuple", 7, _OPT, "VarType.Tuple")])
    _enum(vt, "Type", VAR_TYPES)
    _message(vt, "TensorDesc", [("data_type", 1, _REQ, "EVarType.Type"),
                                ("dims", 2, _REP, "int64")])
    _message(vt, "LoDTensorDesc", [("tensor", 1, _REQ, "VarType.TensorDesc"),
                                   ("lod_level", 2, _OPT, "int32", "0")])
    _message(vt, "ReaderDesc", [("lod_tensor", 1, _REP, "VarType.LoDTensorDesc")])
    _message(vt, "Tuple", [("element_type", 1, _REP, "EVarType.Type")])
    var = _message(f, "VarDesc", [
        ("name", 1, _REQ, "string"), ("type", 2, _REQ, "VarType"),
        ("persistable", 3, _OPT, "bool", "false"), ("need_check_feed", 4, _OPT, "bool", "false"),
        ("is_parameter", 5, _OPT, "bool", "false"), ("stop_gradient", 6, _OPT, "bool", "false"),
        ("attrs", 7, _REP, "VarDesc.Attr")])
    _message(var, "Attr", [("name", 1, _REQ, "string"), ("type", 2, _REQ, "EAttrType"),
                           ("i", 3, _OPT, "int32"), ("s", 4, _OPT, "string"),
                           ("ints", 5, _REP, "int32")])
    _message(f, "BlockDesc", [
        ("idx", 1, _REQ, "int32"), ("parent_idx", 2, _REQ, "int32"),
        ("vars", 3, _REP, "VarDesc"), ("ops", 4, _REP, "OpDesc"),
        ("forward_block_idx", 5, _OPT, "int32", "-1")])
    _message(f, "OpVersion", [("version", 1, _REQ, "int32")])
    ovm = _message(f, "OpVersionMap", [("pair", 1, _REP, "OpVersionMap.OpVersionPair")])
    _message(ovm, "OpVersionPair", [("op_name", 1, _REQ, "string"),
                                    ("op_version", 2, _REQ, "OpVersion")])
    # 1.8's op_compatible_map (field 3) is not declared: protobuf keeps it as unknown bytes
    _message(f, "ProgramDesc", [("blocks", 1, _REP, "BlockDesc"), ("version", 4, _OPT, "Version"),
                                ("op_version_map", 5, _OPT, "OpVersionMap")])
    return f


class Messages:
    """The message classes of the schema, as attributes (``Messages().ProgramDesc``)."""

    def __init__(self):
        from google.protobuf import descriptor_pool, message_factory
        pool = descriptor_pool.DescriptorPool()
        pool.Add(_file())
        for name in ("ProgramDesc", "BlockDesc", "VarDesc", "VarType", "OpDesc", "Version",
                     "OpVersionMap"):
            cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(
                f"{PACKAGE}.{name}"))
            setattr(self, name, cls)
        self.TensorDesc = self.VarType.TensorDesc


@functools.lru_cache(maxsize=1)
def messages() -> Messages:
    """The schema's message classes (built once: a descriptor pool is costly)."""
    return Messages()
