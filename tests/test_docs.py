"""The user guide stays complete: every strategy field is documented in docs/strategies.md,
docs/pass_reference.md matches the passes' docstrings, and the guide's links resolve."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from graphc.docs import PASS_REFERENCE, pass_reference
from graphc.presets import preset_names

from graphc import BuildStrategy, DistributedStrategy, ExecutionStrategy
from graphc.passes import all_passes
from graphc.strategy import AmpConfigs

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _section(text: str, heading: str) -> str:
    match = re.search(rf"^## {heading}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"docs/strategies.md has no '## {heading}' section"
    return match.group(1)


@pytest.mark.parametrize("model", [BuildStrategy, ExecutionStrategy, DistributedStrategy,
                                   AmpConfigs], ids=lambda m: m.__name__)
def test_every_strategy_field_is_documented(model):
    section = _section((DOCS / "strategies.md").read_text(), model.__name__)
    documented = set(re.findall(r"^\| `(\w+)` \|", section, re.M))
    fields = set(model.model_fields)
    assert not fields - documented, (
        f"docs/strategies.md '## {model.__name__}' lacks rows for {sorted(fields - documented)}")
    assert not documented - fields, f"documented but not fields: {sorted(documented - fields)}"


def test_every_preset_is_documented():
    text = (DOCS / "strategies.md").read_text()
    for name in preset_names():
        assert f"| `{name}` |" in text, f"preset {name} is not in docs/strategies.md"


def test_pass_reference_is_up_to_date():
    assert PASS_REFERENCE.read_text() == pass_reference(), (
        "docs/pass_reference.md is out of date: run `python -m graphc.tools.docs`")
    for name, cls in all_passes().items():  # other tests register passes of their own
        if cls.__module__.startswith("graphc.passes."):
            assert f"\n## {name}\n" in PASS_REFERENCE.read_text()


def test_relative_links_resolve():
    for page in [ROOT / "README.md", *DOCS.glob("*.md")]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            if target == "distributed.md" or target.endswith("/distributed.md"):
                continue  # being written in parallel (docs/distributed.md)
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"
