"""The pass contract: a Pass is a frozen pydantic model (its fields are its options) with a
kebab-case ``name``; ``run(graph, ctx)`` edits through ``ctx.rewriter`` and counts in
``ctx.stats``. A pass takes a valid graph and leaves a valid graph."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from ...ir.errors import GraphcError
from ...ir.graph import Graph, Op, Value


class PassError(GraphcError):
    """A pass name or option is unknown or invalid, or a pipeline text does not parse."""


class PassContext:
    """What a running pass gets: a rewriter whose edits carry the pass's name, the values
    that must stay computed (fetch targets), the device count, and a statistics counter."""

    def __init__(self, graph: Graph, pass_name: str, keep: Iterable[Value] = (),
                 num_devices: int = 1):
        self.graph = graph
        self.keep = set(keep)
        self.num_devices = num_devices
        self.stats: Counter[str] = Counter()
        self.rewriter = graph.rewriter(origin=pass_name)

    def count(self, key: str, n: int = 1) -> None:
        self.stats[key] += n

    def decline(self, reason: str, n: int = 1) -> None:
        """Record why a candidate was left alone: ``skipped: <reason>``."""
        self.stats[f"skipped: {reason}"] += n

    @property
    def changed(self) -> bool:
        return self.rewriter.changed


@dataclass
class PassResult:
    name: str
    spec: str
    changed: bool
    seconds: float
    stats: dict[str, int] = field(default_factory=dict)

    def stats_text(self) -> str:
        return ", ".join(f"{k}: {v}" for k, v in self.stats.items()) or "-"


class Pass(BaseModel):
    """Base class. Subclasses set ``name`` and implement ``run``; options are fields.

    ``regions``: what the pass does inside region bodies (infra/regions.py): ``"recurse"``
    (the PassManager runs it on every body too) or ``"decline"`` with ``regions_reason``.
    Every graphc pass says which (tests/test_pass_regions.py); left empty, it declines."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)
    name: ClassVar[str] = ""
    regions: ClassVar[str] = ""
    regions_reason: ClassVar[str] = ""

    def run(self, graph: Graph, ctx: PassContext) -> None:
        raise NotImplementedError

    @classmethod
    def summary(cls) -> str:
        """The first line of the pass's docstring."""
        return (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""

    def spec(self) -> str:
        """``name`` or ``name{option=value,...}`` for options off their defaults."""
        changed = {k: v for k, v in self.model_dump().items()
                   if v != type(self).model_fields[k].default}
        if not changed:
            return self.name
        return self.name + "{" + ",".join(f"{k}={json.dumps(v)}" for k, v in
                                          changed.items()) + "}"

    def __str__(self) -> str:
        return self.spec()


def members_of(option: str, allowed: Iterable[str], what: str):
    """A validator for a list option whose items must come from ``allowed``; use it in a
    pass's class body: ``_check = members_of("act_types", SUPPORTED, "activations")``."""
    allowed = list(allowed)

    def check(value: list[str]) -> list[str]:
        unknown = [v for v in value if v not in allowed]
        if unknown:
            raise ValueError(f"unsupported {what} {unknown}; expected some of {allowed}")
        return value

    return field_validator(option)(staticmethod(check))


# registry: passes by name (@register_pass)
_PASSES: dict[str, type[Pass]] = {}


def register_pass(cls: type[Pass]) -> type[Pass]:
    """Class decorator: make the pass available by its kebab-case name."""
    if not cls.name or cls.name != cls.name.lower() or " " in cls.name or "_" in cls.name:
        raise AssertionError(f"{cls.__name__}: pass names are kebab-case, got {cls.name!r}")
    if cls.name in _PASSES and _PASSES[cls.name] is not cls:
        raise AssertionError(f"pass '{cls.name}' registered twice")
    _PASSES[cls.name] = cls
    return cls


def all_passes() -> dict[str, type[Pass]]:
    return dict(sorted(_PASSES.items()))


def make_pass(name: str, **options: Any) -> Pass:
    cls = _PASSES.get(name)
    if cls is None:
        raise PassError(f"unknown pass '{name}'; passes are: {', '.join(sorted(_PASSES))}")
    try:
        return cls(**options)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}"
                             for e in exc.errors())
        raise PassError(f"pass '{name}': {problems}") from None


def parse_pipeline(text: str) -> list[Pass]:
    """``"dce,fuse-elewise-add-act{act_types=[\\"relu\\"]}"`` -> passes (inverse of str)."""
    passes, i, text = [], 0, text.strip()
    decoder = json.JSONDecoder()
    while i < len(text):
        j = i
        while j < len(text) and text[j] not in ",{":
            j += 1
        name = text[i:j].strip()
        if not name:
            raise PassError(f"pipeline '{text}': empty pass name at column {i + 1}")
        options: dict[str, Any] = {}
        if j < len(text) and text[j] == "{":
            j += 1
            while text[j] != "}":
                eq = text.index("=", j)
                key = text[j:eq].strip()
                try:
                    value, j = decoder.raw_decode(text, eq + 1)
                except json.JSONDecodeError:
                    raise PassError(f"pipeline '{text}': bad value for option '{key}' of "
                                    f"'{name}' at column {eq + 2}") from None
                options[key] = value
                if text[j] == ",":
                    j += 1
            j += 1
        passes.append(make_pass(name, **options))
        if j < len(text):
            if text[j] != ",":
                raise PassError(f"pipeline '{text}': expected ',' at column {j + 1}")
            j += 1
        i = j
    return passes


def single_user(graph: Graph, value: Value, keep: set) -> bool:
    """Whether exactly one op reads ``value`` (once) and nothing else needs it."""
    return (graph.num_uses(value) == 1 and value not in keep
            and not graph.is_output(value))


def user_count_reason(graph: Graph, value: Value, keep: set) -> str:
    if value in keep:
        return "intermediate is fetched"
    if graph.is_output(value):
        return "intermediate is a graph output"
    return f"intermediate has {graph.num_uses(value)} users"


def only_op(graph: Graph, value: Value) -> Op | None:
    return graph.sole_user(value)
