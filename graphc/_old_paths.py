"""Import paths graphc had before its layers became packages (``graphc.optimizer``,
``graphc.io``, ``graphc.cli``, ...): each old name is the new module itself, on first use."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

OLD_PATHS = {
    **{f"graphc.{m}": f"graphc.build.{m}" for m in (
        "backward", "initializer", "regularizer", "param_attr", "amp")},
    "graphc.optimizer": "graphc.build.optimizers",
    "graphc.adaptive_optimizers": "graphc.build.optimizers.adaptive",
    "graphc.weight_averaging": "graphc.build.optimizers.averaging",
    **{f"graphc.{m}": f"graphc.dataio.{m}" for m in ("io", "saving", "loader_epoch", "dataset")},
    **{f"graphc.{m}": f"graphc.tools.{m}" for m in (
        "cli", "demo", "docs", "viz", "models", "presets")},
    "graphc.ir.ops": "graphc.ops",
}


class OldPathFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers an old path with the module at its new one (the same object, so patching
    either patches both); ``python -m graphc.tools.docs`` runs the new module's code."""

    def find_spec(self, name, path=None, target=None):
        if name not in OLD_PATHS:
            return None
        # the new file as origin: ``python -m graphc.tools.docs`` sees its real __file__
        origin = importlib.util.find_spec(OLD_PATHS[name]).origin
        return importlib.util.spec_from_loader(name, self, origin=origin)

    def create_module(self, spec):
        module = importlib.import_module(OLD_PATHS[spec.name])
        spec.loader_state = module.__spec__  # the import system sets __spec__ to ours next
        return module

    def exec_module(self, module):
        # the new module ran when create_module imported it; it keeps its own spec
        module.__spec__ = module.__spec__.loader_state

    def get_code(self, name):  # runpy (python -m) asks the loader for the code to run
        new = importlib.util.find_spec(OLD_PATHS[name])
        return new.loader.get_code(OLD_PATHS[name])


def install() -> None:
    """Put the finder on ``sys.meta_path`` once per interpreter."""
    if not any(isinstance(f, OldPathFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, OldPathFinder())  # before the path finder: a stale
        # folder of the old layout (an upgrade over an old checkout) must not shadow it
