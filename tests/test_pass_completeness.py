"""Every registered pass has its own test module and golden IR (issue 23): a new pass without
tests/test_pass_<snake_name>.py naming it and calling check_golden, or without a non-empty
tests/golden/<pass-name>/, fails here with the missing pieces named."""

from __future__ import annotations

from pathlib import Path

from graphc.passes import all_passes

TESTS = Path(__file__).parent
GOLDEN = TESTS / "golden"
# golden folders that belong to no single pass, and why
SHARED_GOLDEN = {"ps-transpile": "the transpiler's programs (every ps-* pass together), "
                                 "test_pserver_transpile.py"}


def graphc_passes() -> list[str]:
    """Registered passes defined in graphc itself (tests register throwaway ones)."""
    return sorted(name for name, cls in all_passes().items()
                  if cls.__module__.startswith("graphc."))


def module_for(name: str) -> Path:
    return TESTS / f"test_pass_{name.replace('-', '_')}.py"


def test_the_registry_is_loaded():
    names = graphc_passes()
    assert len(names) >= 24 and {"dce", "fuse-bn-act", "ps-trainer-graph"} <= set(names)


def test_every_pass_has_its_own_test_module():
    missing, unnamed = [], []
    for name in graphc_passes():
        path = module_for(name)
        if not path.is_file():
            missing.append(f"{name}: no {path.relative_to(TESTS.parent)}")
            continue
        text = path.read_text()
        if f'"{name}"' not in text or "check_golden" not in text:
            unnamed.append(f"{name}: {path.name} does not name the pass or check a golden")
    assert not missing + unnamed, "passes without their own tests:\n  " + "\n  ".join(
        missing + unnamed)


def test_every_pass_has_golden_ir():
    missing = [f"{name}: no golden file in tests/golden/{name}/" for name in graphc_passes()
               if not (GOLDEN / name).is_dir()
               or not any(p.is_file() and p.stat().st_size for p in (GOLDEN / name).iterdir())]
    assert not missing, "passes without golden IR:\n  " + "\n  ".join(missing)


def test_every_golden_folder_belongs_to_a_pass():
    passes = set(graphc_passes())
    orphans = sorted(p.name for p in GOLDEN.iterdir()
                     if p.is_dir() and p.name not in passes and p.name not in SHARED_GOLDEN)
    assert not orphans, f"golden folders of no registered pass: {orphans}"
