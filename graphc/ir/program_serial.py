"""Program.to_string / Program.parse_from_string: a Program as graphc's text IR and back (the
form save_inference_model writes); Paddle's binary ProgramDesc by dataio/paddle_format."""

from __future__ import annotations

from .errors import GraphcError, ParseError


def program_to_string(program, throw_on_error: bool, with_details: bool = False) -> str:
    """The program's text IR; ``with_details`` appends one line per variable with the fields
    the text leaves implicit (persistable, stop_gradient, lod_level, is_data)."""
    if not isinstance(throw_on_error, bool) or not isinstance(with_details, bool):
        raise GraphcError("Program.to_string: throw_on_error and with_details must be bools")
    # lowering verifies the program and raises on a broken one, whatever throw_on_error says:
    # graphc has no half-initialised ProgramDesc fields to skip
    text = program.to_text()
    if not with_details:
        return text
    lines = [text.rstrip("\n"), "", "# variables"]
    for block in program.blocks:
        for var in block.vars.values():
            lines.append(f"# block {block.idx} {var.name}: shape={list(var.shape or [])} "
                         f"dtype={var.dtype} persistable={var.persistable} "
                         f"stop_gradient={var.stop_gradient} lod_level={var.lod_level} "
                         f"is_data={var.is_data}")
    return "\n".join(lines) + "\n"


# registry: readers of foreign binary program formats, (first byte, reader) pairs filled at
# import by graphc.dataio.paddle_format (the IR may not import the data layer)
BINARY_READERS: dict = {}
# and its writer: program -> Paddle ProgramDesc bytes (``program.desc.serialize_to_string``)
BINARY_WRITERS: dict = {}


def program_from_string(binary_str):
    """A Program from ``to_string()``'s text (str, or UTF-8 bytes), or from the bytes of a
    Paddle ProgramDesc (``program.desc.serialize_to_string()``; dataio/paddle_format)."""
    from .text import parse
    if isinstance(binary_str, bytes | bytearray):
        data = bytes(binary_str)
        reader = BINARY_READERS.get(data[:1])
        if reader is not None:
            return reader(data)
        try:
            binary_str = data.decode("utf-8")
        except UnicodeDecodeError:
            raise GraphcError(
                "Program.parse_from_string: these bytes are neither graphc's text IR nor a "
                "Paddle ProgramDesc; pass Program.to_string()'s text or "
                "program.desc.serialize_to_string()'s bytes") from None
    if not isinstance(binary_str, str):
        raise GraphcError("Program.parse_from_string: expected the str or bytes of "
                          f"Program.to_string(), got {type(binary_str).__name__}")
    try:
        return parse(binary_str).to_program()
    except ParseError as exc:
        raise GraphcError(f"Program.parse_from_string: not graphc's text IR: {exc}") from None
