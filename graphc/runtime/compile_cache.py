"""JAX's persistent compilation cache, on by default for graphc: a second process that runs
the same program loads its compiled steps from disk instead of waiting for XLA's compile.

This is graphc's one deliberate global JAX setting (``jax_compilation_cache_dir`` is
process-wide in JAX). graphc sets it lazily, when it first compiles (never at import), and
only when nobody else has: a directory the user gave JAX (``jax.config.update`` or the
``JAX_COMPILATION_CACHE_DIR`` environment variable) is left as it is. The environment
variable ``GRAPHC_COMPILATION_CACHE`` chooses:

- unset: ``$XDG_CACHE_HOME/graphc/jax`` (``~/.cache/graphc/jax`` without XDG_CACHE_HOME);
- ``0`` / ``off`` / ``false`` / ``no``: no cache (graphc changes no JAX setting at all);
- anything else: that directory.

``set_compilation_cache(path or None)`` does the same from Python (before graphc's first
compile; None turns it off). JAX's own thresholds still apply: it stores compiles that
took at least ``jax_persistent_cache_min_compile_time_secs`` (1 s by default), so a large
program's steps are cached while a tiny one's are not worth the disk.
"""

from __future__ import annotations

import os
import warnings

import jax

__all__ = ["compilation_cache_dir", "default_cache_dir", "ensure_compilation_cache",
           "set_compilation_cache"]

_OFF = ("0", "off", "false", "no")
_UNSET = object()
# process: mirrors JAX's own process-wide cache setting (jax.config), set once per process:
# [done, the directory graphc set (None: it set nothing), the choice set_compilation_cache
# made (a path, None for off), or _UNSET to read the environment]
_state: list = [False, None, _UNSET]


def default_cache_dir() -> str:
    """``$XDG_CACHE_HOME/graphc/jax``, or ``~/.cache/graphc/jax``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "graphc", "jax")


def _chosen_dir() -> str | None:
    if _state[2] is not _UNSET:
        return _state[2]
    value = os.environ.get("GRAPHC_COMPILATION_CACHE", "").strip()
    if value.lower() in _OFF:
        return None
    return os.path.expanduser(value) if value else default_cache_dir()


def set_compilation_cache(path: str | os.PathLike | None) -> None:
    """Where graphc keeps compiled programs (None: nowhere). Call it before graphc's first
    compile; it wins over ``GRAPHC_COMPILATION_CACHE``, and, like it, never replaces a
    directory the user gave JAX directly."""
    if _state[0]:
        warnings.warn("graphc has already compiled in this process; set_compilation_cache "
                      "takes effect only before the first compile", stacklevel=2)
        return
    _state[2] = None if path is None else os.fspath(path)


def compilation_cache_dir() -> str | None:
    """The directory graphc set for JAX's persistent cache, or None (off, not yet
    compiled, or the user's own JAX setting in force)."""
    return _state[1]


def ensure_compilation_cache() -> None:
    """Called when graphc compiles: the first call sets JAX's cache directory (see the
    module doc); later calls return at once."""
    if _state[0]:
        return
    _state[0] = True
    path = _chosen_dir()
    if path is None or jax.config.jax_compilation_cache_dir is not None:
        return  # off, or the user's own choice stands
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        warnings.warn(f"graphc: cannot create the compilation cache directory {path!r} "
                      f"({exc}); compiling without a persistent cache (set "
                      "GRAPHC_COMPILATION_CACHE to another directory, or 0)", stacklevel=2)
        return
    jax.config.update("jax_compilation_cache_dir", path)
    _state[1] = path
