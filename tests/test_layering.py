"""The import rules between graphc's layers (docs/architecture.md), checked statically: the IR,
the passes and the op definitions never import JAX or the run-time; the run-time never
imports the data layer or the Fluid surface.

Every ``import`` and ``from ... import`` of a module counts, function-level ones included
(a lazy import is still a dependency); relative imports are resolved to absolute names.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GRAPHC = ROOT / "graphc"

JAX = ("jax", "jaxlib")
RUNTIME = ("graphc.runtime", "graphc.backends")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in ``path``; ``from a import b`` also
    names ``a.b`` (b may be a module)."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module
            found.append((node.lineno, name))
            found += [(node.lineno, f"{name}.{alias.name}") for alias in node.names]
    return found


def _under(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def violations(paths, forbidden, allowed=()) -> list[str]:
    """'file:line imports name' for each import of a forbidden module, except those that
    ``allowed`` grants ((file relative to the root, module) pairs: that module and below)."""
    out = []
    for path in paths:
        rel = path.relative_to(ROOT).as_posix()
        for line, name in imports_of(path):
            if _under(name, forbidden) and not any(
                    f == rel and _under(name, (m,)) for f, m in allowed):
                out.append(f"{rel}:{line} imports {name}")
    return sorted(set(out))


def _py(folder: str) -> list[Path]:
    return sorted((GRAPHC / folder).rglob("*.py"))


JAX_FREE = {
    "graphc/ir": _py("ir"),
    "graphc/passes": _py("passes"),
    "graphc/ops/*/defs.py": sorted(GRAPHC.glob("ops/*/defs.py")) + [GRAPHC / "ops/__init__.py"],
}


@pytest.mark.parametrize("layer", sorted(JAX_FREE))
def test_ir_passes_and_op_definitions_never_import_jax_or_the_runtime(layer):
    paths = JAX_FREE[layer]
    assert paths, f"no modules found for {layer}"
    bad = violations(paths, JAX + RUNTIME)
    assert not bad, (f"{layer} must stay JAX-free and below the run-time (lowering rules go "
                     "in the family's lowering.py):\n" + "\n".join(bad))


def test_runtime_never_imports_data_distribution_or_fluid():
    """The data loader, the launcher and parameter servers reach the executor through the
    host services it owns (runtime/host_services.py), never by being imported."""
    bad = violations(_py("runtime"), ("graphc.dataio", "graphc.fluid", "graphc.distributed"))
    assert not bad, ("runtime/ must not import the data layer, distribution or fluid/:\n"
                     + "\n".join(bad))


def test_ir_imports_nothing_else_of_graphc():
    """The IR is the bottom layer: op families register into it, never the other way."""
    paths = _py("ir")
    others = [n for n in ("graphc." + p.name for p in GRAPHC.iterdir()
                          if p.is_dir() and p.name != "ir" and (p / "__init__.py").exists())]
    others += ["graphc.strategy", "graphc.ops"]
    bad = violations(paths, tuple(others))
    assert not bad, "graphc/ir/ imports only itself:\n" + "\n".join(bad)


# Layers above the IR that never import the Paddle surface or the run-time loop: fluid/ is
# built on them, and program construction does not run programs. (layers/ reaches fluid's
# advice table for names it lacks: graphc/fluid/_missing.py, allowed by name.)
BELOW_FLUID = {
    "graphc/build": (_py("build"), ("graphc.fluid", "graphc.runtime", "graphc.dataio"),
                     # Optimizer.state_dict/set_dict: values of the global scope
                     (("graphc/build/optimizers/base.py", "graphc.runtime.scope"),)),
    "graphc/passes": (_py("passes"), ("graphc.fluid", "graphc.dataio", "graphc.distributed",
                                      "graphc.build", "graphc.layers"), ()),
    "graphc/backends": (_py("backends"), ("graphc.fluid", "graphc.runtime", "graphc.passes",
                                          "graphc.dataio", "graphc.distributed"), ()),
    "graphc/layers": (_py("layers"), ("graphc.fluid", "graphc.dataio", "graphc.passes"),
                      (("graphc/layers/__init__.py", "graphc.fluid._missing"),)),
}


@pytest.mark.parametrize("layer", sorted(BELOW_FLUID))
def test_lower_layers_never_import_upward(layer):
    paths, forbidden, allowed = BELOW_FLUID[layer]
    bad = violations(paths, forbidden, allowed)
    assert not bad, f"{layer} imports a layer above it:\n" + "\n".join(bad)


def test_op_definitions_change_only_their_own_ops():
    """A family's defs.py declares its ops' LoD and grad rules in their register() calls; it
    never sets rules on ops afterwards (set_lod_rule, the old side tables)."""
    bad = []
    for path in sorted(GRAPHC.glob("ops/*/defs.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "set_lod_rule":
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} calls set_lod_rule")
            if isinstance(node, ast.ImportFrom) and any(
                    a.name in ("GRAD_READS", "GRAD_TYPE_FROM", "SPARSE_GRAD", "set_lod_rule")
                    for a in node.names):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} imports a side table")
    assert not bad, "declare LoD/grad rules as register() keywords:\n" + "\n".join(bad)


def test_the_scan_sees_function_level_and_relative_imports(tmp_path, monkeypatch):
    pkg = tmp_path / "graphc" / "passes"
    pkg.mkdir(parents=True)
    mod = pkg / "lazy.py"
    mod.write_text("def f():\n    from ..runtime import executor\n    import jax.numpy\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    names = {n for _, n in imports_of(mod)}
    assert {"graphc.runtime", "graphc.runtime.executor", "jax.numpy"} <= names
    assert len(violations([mod], JAX + RUNTIME)) == 3
