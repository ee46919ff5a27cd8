"""Parse the textual IR back into a verified Graph: anything parses or raises ParseError /
VerifyError naming the line."""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ..errors import GraphcError, ParseError
from ..graph import Graph, Value, VarInfo, gc_paused
from ..opdef import get_op_def as _get_op_def
from ..opdef import has_op_def
from ..types import TensorType, array_type, dtype_from_short, lod_type, sparse_type
from .printer import _default_stop_gradient

# ---------------------------------------------------------------------------- parsing

_NAME = re.compile(r'[^\s,:()\[\]{}="]+')
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SLOT = re.compile(r"[A-Za-z_][A-Za-z0-9_@]*")  # grad slots: Out@GRAD
_TYPE = re.compile(r"([a-z0-9]+)\[([-0-9,]*)\]")
_SPARSE_TYPE = "selected_rows<"
_ARRAY_TYPE = "array<"
_LOD_TYPE = re.compile(r"lod([0-9]+)<")
_VAR_NAME = re.compile(r'^[^\s,:()\[\]{}=#%"]+$')  # the Program's naming rule
_DECODER = json.JSONDecoder()
_DECLARED = re.compile(r'%([^\s,:()\[\]{}="]+):')  # a value declaration: %name: type


def _is_count(value, low: int = 1) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value < 2**31
_BLANKS = (" ", "\t")


class _Line:
    def __init__(self, text: str, lineno: int):
        self.text, self.lineno, self.pos = text, lineno, 0

    def error(self, message: str) -> ParseError:
        return ParseError(message, self.lineno, self.pos, self.text)

    def skip(self) -> None:
        while self.text.startswith(_BLANKS, self.pos):
            self.pos += 1

    def peek(self, s: str) -> bool:
        self.skip()
        return self.text.startswith(s, self.pos)

    def accept(self, s: str) -> bool:
        text, pos = self.text, self.pos  # skip() inlined: this runs ~40 times per op
        while text.startswith(_BLANKS, pos):
            pos += 1
        if text.startswith(s, pos):
            self.pos = pos + len(s)
            return True
        self.pos = pos
        return False

    def expect(self, s: str) -> None:
        if not self.accept(s):
            raise self.error(f"expected '{s}'")

    def match(self, regex: re.Pattern, what: str) -> re.Match:
        self.skip()
        m = regex.match(self.text, self.pos)
        if not m:
            raise self.error(f"expected {what}")
        self.pos = m.end()
        return m

    def json_value(self) -> Any:
        self.skip()
        try:
            value, end = _DECODER.raw_decode(self.text, self.pos)
        except json.JSONDecodeError:
            raise self.error("expected a value (number, string, true/false or list)") from None
        except ValueError as exc:  # a number past Python's int digit limit
            raise self.error(f"value out of range ({exc})") from None
        except RecursionError:
            raise self.error("value nested too deeply") from None
        self.pos = end
        return value

    def at_end(self) -> bool:
        self.skip()
        return self.pos >= len(self.text)


class _Parser:
    def __init__(self, text: str):
        self.lines = text.splitlines()
        self.graph = Graph()
        self.seq = 0
        # values declared inside a region block: name -> (op type, region, line), to say why
        # an outer reference to one fails (a region's values leave only as the op's results)
        self.region_values: dict[str, tuple[str, str, int]] = {}

    def parse(self) -> Graph:
        g = self.graph
        body = [(i + 1, ln) for i, ln in enumerate(self.lines)
                if ln.strip() and not ln.strip().startswith("//")]
        if not body:
            raise ParseError("empty input: expected 'graph @name {'", 1)
        lineno, first = body[0]
        line = _Line(first, lineno)
        line.expect("graph")
        line.expect("@")
        g.name = line.match(_NAME, "a graph name").group()
        if line.accept("("):
            while not line.accept(")"):
                key = line.match(_WORD, "a graph attribute").group()
                line.expect("=")
                if key != "random_seed":
                    raise line.error(f"unknown graph attribute '{key}'")
                g.random_seed = line.json_value()
                if not (isinstance(g.random_seed, int) and not isinstance(g.random_seed, bool)
                        and 0 <= g.random_seed < 2**63):
                    raise line.error(f"random_seed must be an integer in [0, 2**63), got "
                                     f"{g.random_seed!r}")
                line.accept(",")
        line.expect("{")
        closed = False
        self.rows, self.next_row = body, 1
        while self.next_row < len(body):
            lineno, text = body[self.next_row]
            self.next_row += 1
            if closed:
                raise ParseError("text after the closing '}'", lineno, 0, text)
            line = _Line(text, lineno)
            if line.accept("}"):
                closed = True
            elif line.accept("input "):
                v = self.decl(line)
                g.inputs.append(v)
            elif line.accept("output "):
                g.outputs.append(self.ref(line))
                g._outputs_version += 1
            else:
                self.op(line)
            if not closed and not line.at_end():
                raise line.error("unexpected text")
        if not closed:
            raise ParseError("missing closing '}'", len(self.lines))
        return g

    def ref(self, line: _Line) -> Value:
        line.expect("%")
        name = line.match(_NAME, "a value name").group()
        try:
            return self.graph.values[name]
        except KeyError:
            inside = self.region_values.get(name)
            if inside is not None:
                raise line.error(
                    f"value '%{name}' is defined inside region '{inside[1]}' of op "
                    f"{inside[0]} (line {inside[2]}); outside its region a value is visible "
                    "only through the op's results") from None
            raise line.error(f"value '%{name}' is used before it is defined") from None

    def decl(self, line: _Line) -> Value:
        g = self.graph
        line.expect("%")
        start = line.pos
        name = line.match(_NAME, "a value name").group()
        base, _, version = name.partition("#")
        # ASCII digits only: str.isdigit() admits '²' and '٣', which int() rejects or reads
        if version and not (version.isascii() and version.isdigit() and len(version) <= 18
                            and version == str(int(version)) and int(version) > 0):
            raise ParseError(f"bad version in '%{name}' (versions are written #1, #2, ...)",
                             line.lineno, start, line.text)
        if not _VAR_NAME.match(base):
            raise ParseError(f"bad variable name '{base}': names contain no whitespace or any "
                             "of , : ( ) [ ] { } = # % \"", line.lineno, start, line.text)
        line.expect(":")
        sparse = line.accept(_SPARSE_TYPE)
        array = not sparse and line.accept(_ARRAY_TYPE)
        line.skip()
        lod = None if sparse else _LOD_TYPE.match(line.text, line.pos)  # array<lod2<...>>
        if lod is not None:
            line.pos = lod.end()
        m = line.match(_TYPE, "a type like f32[-1,10], lod1<i64[-1,1]> or "
                              "selected_rows<f32[100,8]>")
        try:
            dims = tuple(int(d) for d in m.group(2).split(",")) if m.group(2) else ()
            if any(d < -1 for d in dims):
                raise ValueError("dimensions are -1 (unknown) or at least 0")
            dtype = dtype_from_short(m.group(1))
            if array:
                if not dims:
                    raise ValueError("a tensor array's type starts with its capacity")
                element = lod_type(dims[1:], dtype, int(lod.group(1))) if lod else \
                    TensorType(dims[1:], dtype)
                t = array_type(element, dims[0])
            else:
                t = sparse_type(dims, dtype) if sparse else \
                    lod_type(dims, dtype, int(lod.group(1))) if lod else TensorType(dims, dtype)
        except (ValueError, GraphcError) as exc:
            raise line.error(f"bad type '{m.group()}': {exc}") from None
        if sparse or lod or array:
            line.expect(">")
        if array and lod:
            line.expect(">")
        flags = self.flags(line) if line.peek("{") else None
        var = g.vars.get(base)
        if var is None:
            var = g._new_var(self.var_info(base, flags or {}, line))
            var.lod_level = t.lod_level or var.lod_level  # the type carries it (old text: a flag)
        elif flags is not None:
            raise line.error(f"flags for '{base}' were already given at its first occurrence")
        if name in g.values:
            raise line.error(f"value '%{name}' is defined twice")
        return g._new_value(var, int(version or 0), t)

    def flags(self, line: _Line) -> dict[str, Any]:
        line.expect("{")
        out: dict[str, Any] = {}
        while not line.accept("}"):
            key = line.match(_WORD, "a flag").group()
            out[key] = line.json_value() if line.accept("=") else True
            if not line.accept(","):
                line.expect("}")
                break
        return out

    def var_info(self, name: str, flags: dict[str, Any], line: _Line) -> VarInfo:
        kinds = [k for k in ("feed", "param", "persistable") if flags.pop(k, False)]
        if len(kinds) > 1:
            raise line.error(f"'{name}' has several kinds: {kinds}")
        info = VarInfo(name, kinds[0] if kinds else "temp")

        def flag(key, default, ok, what):
            value = flags.pop(key, default)
            if not ok(value):
                raise line.error(f"'{name}': flag {key} must be {what}, got {value!r}")
            return value
        is_bool = lambda v: isinstance(v, bool)  # noqa: E731
        info.trainable = flag("trainable", True, is_bool, "true or false")
        info.stop_gradient = flag("stop_gradient", _default_stop_gradient(info), is_bool,
                                  "true or false")
        info.learning_rate = float(flag(
            "learning_rate", 1.0, lambda v: isinstance(v, int | float) and not isinstance(v, bool)
            and math.isfinite(v), "a finite number"))
        info.lod_level = flag("lod_level", 0, lambda v: isinstance(v, int) and not isinstance(
            v, bool) and 0 <= v <= 8, "an integer in [0, 8]")
        shard = flags.pop("shard", None)
        if shard is not None:
            if not (isinstance(shard, list) and len(shard) == 2 and _is_count(shard[0])
                    and isinstance(shard[1], list) and all(_is_count(d, 0) for d in shard[1])):
                raise line.error(f"'{name}': shard must be [nranks, [dims]], got {shard!r}")
            info.shard = (shard[0], tuple(shard[1]))
        stack_of = flags.pop("stack_of", None)
        if stack_of is not None:
            if not (info.persistable and isinstance(stack_of, list) and stack_of and all(
                    isinstance(m, str) and m for m in stack_of)
                    and len(set(stack_of)) == len(stack_of)):
                raise line.error(f"'{name}': stack_of must list distinct member names of a "
                                 f"persistable, got {stack_of!r}")
            info.extra["stack_of"] = tuple(stack_of)
        if flags:
            raise line.error(f"unknown flags for '{name}': {sorted(flags)}")
        return info

    def slot_list(self, line: _Line, item) -> dict[str, list]:
        out: dict[str, list] = {}
        while True:
            slot = line.match(_SLOT, "a slot name").group()
            if slot in out:
                raise line.error(f"slot '{slot}' given twice")
            line.expect("=")
            if line.accept("["):
                vals = []
                while not line.accept("]"):
                    vals.append(item(line))
                    if not line.accept(","):
                        line.expect("]")
                        break
            else:
                vals = [item(line)]
            out[slot] = vals
            if not line.accept(","):
                return out

    def op(self, line: _Line) -> None:
        g = self.graph
        if line.accept("("):
            outs = {} if line.accept(")") else self.slot_list(line, self.decl)
            if outs:
                line.expect(")")
            single = False
        else:
            outs = {"": [self.decl(line)]}
            single = True
        line.expect("=")
        type_start = line.pos + 1
        op_type = line.match(_WORD, "an op type").group()
        if not has_op_def(op_type):
            raise ParseError(f"unknown op type '{op_type}'", line.lineno, type_start, line.text)
        opdef = _get_op_def(op_type)
        if single:
            outs = {opdef.output_names[0]: outs[""]} if opdef.outputs else outs
        line.expect("(")
        ins = {} if line.accept(")") else self.slot_list(line, self.ref)
        if ins:
            line.expect(")")
        attrs: dict[str, Any] = {}
        if line.accept("{"):
            while not line.accept("}"):
                key = line.match(_WORD, "an attribute name").group()
                line.expect("=")
                attrs[key] = line.json_value()
                if not line.accept(","):
                    line.expect("}")
                    break
        role = attrs.pop("op_role", "forward")
        source = None
        if line.accept("loc("):
            path = line.json_value()
            line.expect(":")
            lineno = line.match(re.compile(r"\d+"), "a line number").group()
            line.expect(")")
            source = f"{path}:{lineno}"
        self.regions(opdef, line, attrs)
        try:
            attrs = opdef.normalize_attrs(attrs, f"op {op_type}")
        except GraphcError as exc:
            raise line.error(str(exc)) from None
        op = g._new_op(op_type, attrs, source, role, (self.seq,))
        self.seq += 1
        try:
            g._connect(op, ins, outs)
        except GraphcError as exc:
            raise line.error(str(exc)) from None


    def regions(self, opdef, line: _Line, attrs: dict) -> None:
        """The op's region blocks: ``name @graph {`` ... ``  }``, the next one starting on the
        closing line of the one before; a list-valued ("strs") region repeats its name."""
        regions = opdef.regions if opdef is not None else ()
        lists = {r for r in regions if opdef.attrs[r].type == "strs"}
        first, listed = line, set()
        while not line.at_end():
            m = _WORD.match(line.text, line.pos)
            if m is None or m.group() not in regions:
                if line is not first:  # a closing line holds nothing but further regions
                    raise line.error("unexpected text")
                return
            region = m.group()
            line.pos = m.end()
            if region in attrs and region not in listed:
                raise line.error(f"attribute '{region}' given twice")
            line.expect("@")
            name = line.match(_NAME, "a graph name").group()
            line.expect("{")
            text, rest = self.block(name, line, opdef.type, region)
            if region in lists:
                attrs.setdefault(region, []).append(text)
                listed.add(region)
            else:
                attrs[region] = text
            if rest is None:
                return
            line = rest

    def block(self, name: str, line: _Line, op_type: str,
              region: str) -> tuple[str, _Line | None]:
        """The lines of a graph-valued attribute, up to its closing ``  }``, as graph text;
        and the rest of the closing line when another region follows on it."""
        inner = []
        while self.next_row < len(self.rows):
            lineno, text = self.rows[self.next_row]
            self.next_row += 1
            if text.rstrip() == "  }" or text.startswith("  } "):
                rest = None
                if text.rstrip() != "  }":
                    rest = _Line(text, lineno)
                    rest.pos = 3
                return f"graph @{name} {{\n" + "\n".join(inner) + "\n}\n", rest
            if not text.startswith("    "):
                raise ParseError("expected a line of the block, indented by 4, or its "
                                 "closing '  }'", lineno, 0, text)
            inner.append(text[2:].rstrip())
            for declared in _DECLARED.findall(text):
                self.region_values.setdefault(declared, (op_type, region, lineno))
        raise line.error("the block opened here has no closing '  }'")


@gc_paused
def parse(text: str) -> Graph:
    """Parse the textual IR printed by ``Graph.to_text``."""
    return _Parser(text).parse()
