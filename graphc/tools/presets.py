"""Strategy presets: the TOML files in ``strategies/``, loaded by name or path into the
BuildStrategy, ExecutionStrategy and (for job-level presets) DistributedStrategy they set.

A preset file holds ``[build_strategy]`` and optionally ``[execution_strategy]`` tables (a
*build* preset, for ``CompiledProgram`` / ``ParallelExecutor``), or one
``[distributed_strategy]`` table with optional ``[distributed_strategy.build_strategy]``,
``.execution_strategy`` and ``.amp_configs`` sub-tables (a *distributed* preset, for
``fleet.distributed_optimizer``). ``load_preset`` reads either kind; its ``build_strategy``
is what a program compiles with in both cases.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..distributed.strategy import DistributedStrategy
from ..strategy import (
    PRESETS_DIR,
    BuildStrategy,
    ExecutionStrategy,
    StrategyError,
    _near_table,
    _own_table,
    read_strategy_file,
    read_strategy_text,
)

TABLES = ("build_strategy", "execution_strategy", "distributed_strategy")


@dataclass
class Preset:
    """A loaded preset: ``kind`` is ``"build"`` or ``"distributed"``; ``description`` is the
    file's leading comment."""

    name: str
    path: Path
    kind: str
    description: str
    build_strategy: BuildStrategy
    execution_strategy: ExecutionStrategy
    distributed_strategy: DistributedStrategy | None = None


def preset_names() -> list[str]:
    """Names of the presets shipped in ``strategies/``."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.toml"))


def preset_path(name_or_path: str | os.PathLike) -> Path:
    """``strategies/NAME.toml`` for a bare name, else the path itself (which must exist)."""
    path = Path(name_or_path)
    if not path.suffix and os.sep not in str(name_or_path):
        path = PRESETS_DIR / f"{name_or_path}.toml"
        if not path.exists():
            raise StrategyError(f"no strategy preset '{name_or_path}'; presets: "
                                f"{', '.join(preset_names())} (or give a .toml path)")
    if not path.exists():
        raise StrategyError(f"strategy file '{path}' does not exist")
    return path


def load_preset(name_or_path: str | os.PathLike) -> Preset:
    """Read and validate a preset by name (``"cpu-reduce"``) or path (``"my.toml"``)."""
    path = preset_path(name_or_path)
    text = read_strategy_text(path)
    data = read_strategy_file(path)
    unknown = [k for k in data if k not in TABLES]
    if unknown or not data:
        near = _near_table(unknown[0]) if unknown else None
        raise StrategyError(f"{path}: a preset has tables {list(TABLES)}; got "
                            f"{repr(unknown[0]) if unknown else 'none'}"
                            + (f" (did you mean '{near}'?)" if near else ""))
    _own_table(BuildStrategy, data, str(path))  # each table a table of fields
    description = _leading_comment(text)
    if "distributed_strategy" in data:
        if set(data) != {"distributed_strategy"}:
            raise StrategyError(f"{path}: a distributed preset puts build_strategy and "
                                "execution_strategy inside [distributed_strategy.*]")
        ds = DistributedStrategy.from_dict(data, str(path))
        return Preset(path.stem, path, "distributed", description, ds.to_build_strategy(),
                      ds.execution_strategy.model_copy(), ds)
    bs = BuildStrategy.from_dict(data.get("build_strategy", {}), f"{path}: build_strategy")
    es = ExecutionStrategy.from_dict(data.get("execution_strategy", {}),
                                     f"{path}: execution_strategy")
    return Preset(path.stem, path, "build", description, bs, es)


def _leading_comment(text: str) -> str:
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("#").strip())
    return " ".join(lines).strip()
