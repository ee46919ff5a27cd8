"""XLA's optimised HLO text with names, metadata, ids and layouts normalised, so that two
compilations differing only in names compare equal; and a short structural summary of it."""

from __future__ import annotations

import difflib
import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field

# Sections XLA prints before the computations: source files, functions, stack frames.
_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_REF = re.compile(r"%([\w.\-]+)")
_LAYOUT = re.compile(r"(\])\{[^{}]*\}")  # f32[8,4]{1,0} -> f32[8,4]
_INDEX_COMMENT = re.compile(r"/\*index=\d+\*/")
_IDS = re.compile(r",\s*(?:channel_id|stack_frame_id|unique_id)=\d+")
_HEADER = re.compile(r"^(ENTRY )?%?([\w.\-]+) \((.*)\) -> (.*) \{$")
_INSTR = re.compile(r"^(ROOT )?%([\w.\-]+) = (.*)$")


def _drop_attribute(text: str, key: str) -> str:
    """``text`` without ``, key={...}`` (balanced braces, braces inside strings ignored)."""
    out, i, token = [], 0, f", {key}={{"
    while (start := text.find(token, i)) >= 0:
        out.append(text[i:start])
        j, depth, quoted = start + len(token), 1, False
        while j < len(text) and depth:
            ch = text[j]
            if ch == '"' and text[j - 1] != "\\":
                quoted = not quoted
            elif not quoted:
                depth += {"{": 1, "}": -1}.get(ch, 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def _balanced(text: str, start: int) -> int:
    """Index just past the parenthesis group opening at ``text[start]``."""
    depth = 0
    for j in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[j], 0)
        if depth == 0:
            return j + 1
    return len(text)


def _clean(line: str) -> str:
    for key in ("metadata", "frontend_attributes"):
        line = _drop_attribute(line, key)
    line = _IDS.sub("", line)
    line = _INDEX_COMMENT.sub("", line)
    return _LAYOUT.sub(r"\1", line).rstrip().rstrip(",")


@dataclass
class Instruction:
    name: str
    type: str
    opcode: str
    operands: str  # the text between the opcode's parentheses
    attributes: str  # everything after them
    root: bool = False


@dataclass
class Computation:
    name: str
    params: str
    result: str
    entry: bool
    instructions: list[Instruction] = field(default_factory=list)


def parse_hlo(text: str) -> tuple[str, list[Computation]]:
    """(module header attributes, computations) of an HLO module's text, cleaned of
    metadata, ids, index comments and layouts."""
    header, comps, current, skipping = "", [], None, False
    for raw in text.splitlines():
        if raw.startswith("HloModule "):
            header = _clean(raw.split(",", 1)[1].strip()) if "," in raw else ""
            continue
        if raw.strip() in _TABLES:
            skipping = True
            continue
        if skipping:
            skipping = bool(raw.strip())
            continue
        line = _clean(raw.strip())
        if not line:
            continue
        if current is None:
            m = _HEADER.match(line)
            if m:
                current = Computation(m.group(2), m.group(3), m.group(4), bool(m.group(1)))
                comps.append(current)
            continue
        if line == "}":
            current = None
            continue
        m = _INSTR.match(line)
        if not m:
            raise ValueError(f"cannot read HLO instruction: {line[:120]}")
        rest = m.group(3)
        split = _balanced(rest, 0) if rest.startswith("(") else rest.index(" ")
        type_, rest = rest[:split], rest[split:].strip()
        paren = rest.index("(")
        end = _balanced(rest, paren)
        current.instructions.append(Instruction(
            m.group(2), type_, rest[:paren], rest[paren + 1:end - 1],
            rest[end:].lstrip(", "), bool(m.group(1))))
    return header, comps


def strip_locations(stablehlo: str) -> str:
    """StableHLO text (``CompiledStep.lowered_text()``) without its source locations: the
    ``loc(...)`` of every operation and the ``#loc`` definitions."""
    out = []
    for line in stablehlo.splitlines():
        if line.startswith("#loc"):
            continue
        while (start := line.find(" loc(")) >= 0:
            line = line[:start] + line[_balanced(line, start + 4):]
        out.append(line.rstrip())
    return "\n".join(out) + "\n"


def _digest(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def _structural(comps: list[Computation]) -> dict[str, tuple[str, list[str]]]:
    """Per computation: (digest, its instructions as name-free lines). An instruction's
    line names its operands and called computations by their structural digests, so the
    result does not depend on names nor on the order instructions are printed in."""
    by_comp: dict[str, tuple[str, list[str]]] = {}
    for comp in comps:  # XLA prints callees before their callers
        digests: dict[str, str] = {}

        def resolve(m: re.Match, digests: dict = digests) -> str:
            name = m.group(1)
            if name in digests:
                return "%" + digests[name]
            if name in by_comp:
                return "@" + by_comp[name][0]
            return "%?"

        lines = []
        for ins in comp.instructions:
            line = (f"{'ROOT ' if ins.root else ''}{ins.type} {ins.opcode}("
                    f"{_REF.sub(resolve, ins.operands)}) {_REF.sub(resolve, ins.attributes)}")
            digests[ins.name] = _digest(line)
            lines.append(line.strip())
        by_comp[comp.name] = (_digest("\n".join(sorted(lines))), lines)
    return by_comp


def fingerprint(text: str) -> str:
    """A digest of the module's structure: equal for two compilations that differ only in
    instruction/computation names, metadata, ids, layouts or the order of independent
    instructions (``normalize`` keeps the order)."""
    header, comps = parse_hlo(text)
    by_comp = _structural(comps)
    entry = [c for c in comps if c.entry]
    body = sorted(by_comp[c.name][0] for c in comps)  # every computation, called or not
    return _digest(_REF.sub("%", header) + "|" + by_comp[entry[0].name][0] + "|"
                   + ",".join(body))


def normalize(text: str) -> str:
    """The module's text with every name replaced by its order of first appearance
    (``%c3``/``%v12``), metadata, ids, index comments and layouts removed."""
    header, comps = parse_hlo(text)
    names: dict[str, str] = {c.name: f"c{i}" for i, c in enumerate(comps)}

    def rename(m: re.Match) -> str:
        return "%" + names.setdefault(m.group(1), f"v{len(names)}")

    out = [f"HloModule m, {header}" if header else "HloModule m"]
    for comp in comps:
        params = re.sub(r"([\w.\-]+): ", lambda m: names.setdefault(
            m.group(1), f"v{len(names)}") + ": ", comp.params)
        out.append(f"{'ENTRY ' if comp.entry else ''}%{names[comp.name]} ({params}) -> "
                   f"{comp.result} {{")
        for ins in comp.instructions:
            lhs = f"{'ROOT ' if ins.root else ''}%{names.setdefault(ins.name, f'v{len(names)}')}"
            attrs = f", {_REF.sub(rename, ins.attributes)}" if ins.attributes else ""
            out.append(f"  {lhs} = {ins.type} {ins.opcode}({_REF.sub(rename, ins.operands)})"
                       f"{attrs}")
        out.append("}")
    return "\n".join(out) + "\n"


def same_hlo(a: str, b: str) -> bool:
    """Whether two optimised HLO texts are the same program up to names and order."""
    return fingerprint(a) == fingerprint(b)


def hlo_diff(a: str, b: str, context: int = 2, limit: int = 80) -> str:
    """A readable account of how two HLO texts differ: opcode counts, then a unified diff of
    their normalised texts (at most ``limit`` lines)."""
    sa, sb = summary(a), summary(b)
    counts = [f"{op}: {sa['opcodes'].get(op, 0)} -> {sb['opcodes'].get(op, 0)}"
              for op in sorted(set(sa["opcodes"]) | set(sb["opcodes"]))
              if sa["opcodes"].get(op, 0) != sb["opcodes"].get(op, 0)]
    diff = list(difflib.unified_diff(normalize(a).splitlines(), normalize(b).splitlines(),
                                     "off", "on", n=context, lineterm=""))
    return "\n".join(["opcode counts: " + ("; ".join(counts) or "equal"), *diff[:limit]])


def summary(text: str) -> dict:
    """Instruction counts by opcode (all computations; a fusion's body counted inside it),
    fusions, computations, while loops and collectives of an optimised HLO text."""
    header, comps = parse_hlo(text)
    called_by_fusion = {re.sub(r"^%", "", m) for c in comps for i in c.instructions
                        if i.opcode == "fusion" for m in re.findall(r"calls=(%[\w.\-]+)",
                                                                    i.attributes)}
    opcodes = Counter(i.opcode for c in comps for i in c.instructions)
    scheduled = Counter(i.opcode for c in comps if c.name not in called_by_fusion
                        for i in c.instructions)
    collectives = ("all-reduce", "all-reduce-start", "reduce-scatter", "all-gather",
                   "all-gather-start", "all-to-all", "collective-permute")
    operands = Counter()  # XLA combines independent all-reduces into one of many operands
    for comp in comps:
        for ins in comp.instructions:
            if ins.opcode in collectives:
                operands[ins.opcode] += ins.operands.count("%")
    return {
        "computations": len(comps),
        "instructions": sum(opcodes.values()),
        "opcodes": dict(sorted(opcodes.items())),
        "unfused_opcodes": dict(sorted(scheduled.items())),
        "fusions": opcodes.get("fusion", 0),
        "while_loops": opcodes.get("while", 0),
        "collectives": {op: opcodes[op] for op in collectives if opcodes.get(op)},
        "collective_operands": dict(operands),
        "aliased_outputs": header.count("may-alias") + header.count("must-alias"),
    }


def compiled_summary(step, feed_shapes=None) -> dict:
    """``summary`` of a CompiledStep's optimised HLO plus XLA's buffer sizes (bytes)."""
    out = summary(step.compiled_text(feed_shapes))
    mem = step.memory_analysis(feed_shapes)
    out["bytes"] = {k: getattr(mem, f"{k}_size_in_bytes") for k in
                    ("argument", "output", "alias", "temp", "generated_code")
                    if hasattr(mem, f"{k}_size_in_bytes")}
    return out
