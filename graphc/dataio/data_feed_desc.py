"""Paddle's data feed description (``data_feed.proto``'s DataFeedDesc) as protobuf text:
the schema is declared through protobuf's descriptors and read/written with text_format."""

from __future__ import annotations

import functools

from .multislot import DatasetError

__all__ = ["DataFeedDesc", "dataset_desc", "desc_message"]

_PACKAGE = "paddle.framework"


@functools.cache  # built once: a pure function of the schema above
def _message_class():
    """DataFeedDesc's message class (data_feed.proto of Paddle 1.8, field for field)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="graphc_data_feed.proto",
                                               package=_PACKAGE, syntax="proto2")

    def message(name, *fields):
        m = proto.message_type.add(name=name)
        for number, (fname, ftype, label, default, type_name) in enumerate(fields, 1):
            field = m.field.add(name=fname, number=number, type=ftype, label=label)
            if default is not None:
                field.default_value = default
            if type_name:
                field.type_name = f".{_PACKAGE}.{type_name}"

    opt, req, rep = f.LABEL_OPTIONAL, f.LABEL_REQUIRED, f.LABEL_REPEATED
    message("Slot", ("name", f.TYPE_STRING, req, None, None),
            ("type", f.TYPE_STRING, req, None, None),
            ("is_dense", f.TYPE_BOOL, opt, "false", None),
            ("is_used", f.TYPE_BOOL, opt, "false", None),
            ("shape", f.TYPE_INT32, rep, None, None))
    message("MultiSlotDesc", ("slots", f.TYPE_MESSAGE, rep, None, "Slot"),
            ("uid_slot", f.TYPE_STRING, opt, None, None))
    message("DataFeedDesc", ("name", f.TYPE_STRING, opt, None, None),
            ("batch_size", f.TYPE_INT32, opt, "32", None),
            ("multi_slot_desc", f.TYPE_MESSAGE, opt, None, "MultiSlotDesc"),
            ("pipe_command", f.TYPE_STRING, opt, None, None),
            ("thread_num", f.TYPE_INT32, opt, None, None),
            ("rank_offset", f.TYPE_STRING, opt, None, None),
            ("pv_batch_size", f.TYPE_INT32, opt, "32", None),
            ("input_type", f.TYPE_INT32, opt, "0", None))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName(f"{_PACKAGE}.DataFeedDesc"))


def desc_message():
    return _message_class()()


def _slot_type(var) -> str:
    from .loader_epoch import _var_dtype
    return "float" if _var_dtype(var).kind == "f" else "uint64"


def dataset_desc(dataset) -> str:
    """A Dataset's description, as Paddle's ``dataset.desc()`` prints it."""
    from google.protobuf import text_format
    msg = desc_message()
    msg.name = "MultiSlotInMemoryDataFeed" if hasattr(dataset, "load_into_memory") \
        else "MultiSlotDataFeed"
    msg.batch_size = dataset.batch_size
    msg.pipe_command = dataset.pipe_command
    msg.thread_num = dataset.thread_num
    for var in dataset.use_vars:
        slot = msg.multi_slot_desc.slots.add(name=var.name, type=_slot_type(var),
                                             is_dense=not var.lod_level, is_used=True)
        if not var.lod_level:
            slot.shape.extend(int(d) for d in var.shape)
    return text_format.MessageToString(msg)


class DataFeedDesc:
    """``fluid.DataFeedDesc(proto_file)``: a data feed description read from its prototxt;
    ``set_batch_size``, ``set_dense_slots``, ``set_use_slots`` change it, ``desc()`` prints it."""

    def __init__(self, proto_file):
        from google.protobuf import text_format
        self.proto_desc = desc_message()
        self.proto_desc.pipe_command = "cat"
        try:
            with open(proto_file, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as exc:
            raise DatasetError(f"{proto_file}: cannot read the data feed description "
                               f"({exc})") from None
        try:
            text_format.Parse(text, self.proto_desc)
        except text_format.ParseError as exc:
            raise DatasetError(f"{proto_file}: not a DataFeedDesc prototxt ({exc})") from None
        self._path = proto_file
        self._index = {s.name: i for i, s in enumerate(self.proto_desc.multi_slot_desc.slots)}

    def set_batch_size(self, batch_size):
        self.proto_desc.batch_size = int(batch_size)

    def _slots(self, names, what: str):
        if self.proto_desc.name != "MultiSlotDataFeed":
            raise DatasetError(f"{what}: only a MultiSlotDataFeed has slots ({self._path} "
                               f"names {self.proto_desc.name!r})")
        for name in names:
            if name not in self._index:
                raise DatasetError(f"{what}: {self._path} has no slot {name!r} (it has "
                                   f"{sorted(self._index)})")
            yield self.proto_desc.multi_slot_desc.slots[self._index[name]]

    def set_dense_slots(self, dense_slots_name):
        for slot in self._slots(dense_slots_name, "set_dense_slots"):
            slot.is_dense = True

    def set_use_slots(self, use_slots_name):
        for slot in self._slots(use_slots_name, "set_use_slots"):
            slot.is_used = True

    def desc(self):
        from google.protobuf import text_format
        return text_format.MessageToString(self.proto_desc)
