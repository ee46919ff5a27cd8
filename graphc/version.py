"""``paddle.version`` for ported scripts: the Paddle release whose Fluid API graphc follows
(what ``fluid.require_version`` compares against), in the module's names."""

from __future__ import annotations

from .fluid.framework import PADDLE_COMPATIBLE_VERSION

full_version = PADDLE_COMPATIBLE_VERSION
major, minor, patch = PADDLE_COMPATIBLE_VERSION.split(".")
rc = "0"
# a release, not a development build (Paddle's develop builds say "0.0.0", istaged False)
istaged = True
# Paddle prints the git commit it was built from; graphc names itself instead of inventing one
commit = "graphc"
with_mkl = "OFF"


def show() -> None:
    """Print the version as Paddle's ``paddle.version.show()`` does, one field a line."""
    if istaged:
        print(f"full_version: {full_version}")
        print(f"major: {major}")
        print(f"minor: {minor}")
        print(f"patch: {patch}")
        print(f"rc: {rc}")
    else:
        print(f"commit: {commit}")


def mkl() -> str:
    return with_mkl
