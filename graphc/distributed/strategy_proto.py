"""DistributedStrategy as protobuf text (``save_to_prototxt``/``load_from_prototxt``): a schema
declared with protobuf's descriptors from the strategy models' fields, read with text_format."""

from __future__ import annotations

import enum
import functools
import typing

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

from ..strategy import AmpConfigs, BuildStrategy, ExecutionStrategy, StrategyError

PACKAGE = "graphc.strategy"
_F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {bool: _F.TYPE_BOOL, int: _F.TYPE_INT64, float: _F.TYPE_DOUBLE, str: _F.TYPE_STRING}
# Paddle's AsyncConfig (parameter-server fields; graphc refuses a_sync, but reads the table)
_ASYNC = {"k_steps": int, "max_merge_var_num": int, "send_queue_size": int,
          "independent_recv_thread": bool, "min_send_grad_num_before_recv": int,
          "thread_pool_size": int, "send_wait_times": int, "runtime_split_send_recv": bool,
          "launch_barrier": bool, "heter_worker_device_guard": str, "lr_decay_steps": int,
          "use_ps_gpu": int}
_NESTED = {AmpConfigs: "AmpConfigs", BuildStrategy: "BuildStrategy",
           ExecutionStrategy: "ExecutionStrategy"}


def _field(msg, file, name: str, number: int, annotation) -> None:
    field = msg.field.add(name=name, number=number, label=_F.LABEL_OPTIONAL)
    origin = typing.get_origin(annotation)
    if origin is list:
        field.label = _F.LABEL_REPEATED
        annotation = typing.get_args(annotation)[0]
    elif origin is typing.Literal:
        annotation = type(typing.get_args(annotation)[0])
    elif origin is dict:
        field.type, field.type_name = _F.TYPE_MESSAGE, f".{PACKAGE}.AsyncConfigs"
        return
    if annotation in _NESTED:
        field.type, field.type_name = _F.TYPE_MESSAGE, f".{PACKAGE}.{_NESTED[annotation]}"
    elif isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        if not any(e.name == annotation.__name__ for e in file.enum_type):
            values = file.enum_type.add(name=annotation.__name__)
            for member in annotation:
                values.value.add(name=member.name, number=int(member.value))
        field.type, field.type_name = _F.TYPE_ENUM, f".{PACKAGE}.{annotation.__name__}"
    else:
        field.type = _SCALARS[annotation]


def _file(top) -> descriptor_pb2.FileDescriptorProto:
    f = descriptor_pb2.FileDescriptorProto(name="graphc_strategy.proto", package=PACKAGE,
                                           syntax="proto2")
    async_msg = f.message_type.add(name="AsyncConfigs")
    for number, (name, kind) in enumerate(_ASYNC.items(), 1):
        _field(async_msg, f, name, number, kind)
    for model, name in [*_NESTED.items(), (top, top.__name__)]:
        msg = f.message_type.add(name=name)
        fields = dict(model.model_fields)
        if model is top:  # a BuildStrategy field set directly goes to build_strategy
            fields.update({k: v for k, v in BuildStrategy.model_fields.items()
                           if k not in fields})
        for number, (fname, info) in enumerate(fields.items(), 1):
            _field(msg, f, fname, number, info.annotation)
    return f


@functools.lru_cache(maxsize=4)
def message_class(top):
    """The message class of strategy model ``top`` (DistributedStrategy), built once."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file(top))
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(
        f"{PACKAGE}.{top.__name__}"))


def _to_dict(msg) -> dict:
    out = {}
    for field, value in msg.ListFields():
        if field.type == _F.TYPE_MESSAGE:
            out[field.name] = _to_dict(value)
        elif field.type == _F.TYPE_ENUM:
            out[field.name] = field.enum_type.values_by_number[value].name
        else:
            out[field.name] = list(value) if field.is_repeated else value
    return out


def parse(top, text: str, source: str) -> dict:
    """The fields a prototxt sets, as a dict (enums by name); StrategyError with the line."""
    msg = message_class(top)()
    try:
        text_format.Parse(text, msg)
    except text_format.ParseError as exc:
        line, detail = exc.GetLine(), str(exc)
        if line is not None and " : " in detail:
            detail = detail.split(" : ", 1)[1]
        if detail.endswith('Expected "}".') and line is not None and line >= text.count("\n"):
            detail += " (a 'name {' block is never closed)"
        raise StrategyError(f"{source}:{line or '?'}: {detail}") from None
    return _to_dict(msg)


def _fill(msg, data: dict, where: str) -> None:
    for name, value in data.items():
        field = msg.DESCRIPTOR.fields_by_name.get(name)
        if field is None:
            raise StrategyError(f"{where}: no prototxt field '{name}'")
        if field.type == _F.TYPE_MESSAGE:
            _fill(getattr(msg, name), value, f"{where}.{name}")
        elif field.is_repeated:
            getattr(msg, name).extend(value)
        elif field.type == _F.TYPE_ENUM:
            setattr(msg, name, field.enum_type.values_by_name[value].number)
        else:
            setattr(msg, name, value)


def to_text(top, data: dict) -> str:
    """``data`` (a strategy's to_dict()) as protobuf text: ``name: value`` lines and
    ``name { ... }`` blocks."""
    msg = message_class(top)()
    _fill(msg, data, top.__name__)
    return text_format.MessageToString(msg)
