"""The persistent compilation cache (runtime/compile_cache.py): on by default, set when graphc
first compiles (not at import), a second process reuses what the first compiled, and
GRAPHC_COMPILATION_CACHE=0 or a directory the user gave JAX leave JAX's setting alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

_SCRIPT = textwrap.dedent("""
    import json, sys
    import jax
    import numpy as np
    import graphc
    from graphc import layers
    from graphc.runtime.compile_cache import compilation_cache_dir

    after_import = jax.config.jax_compilation_cache_dir
    main, start = graphc.Program(), graphc.Program()
    main.random_seed = start.random_seed = 1
    with graphc.program_guard(main, start):
        x = graphc.data("x", [-1, 4], "float32")
        loss = layers.mean(layers.fc(layers.fc(x, 8, act="relu"), 1))
        graphc.optimizer.SGD(0.1).minimize(loss)
    exe = graphc.Executor()
    exe.run(start)
    out, = exe.run(main, feed={"x": np.ones((2, 4), np.float32)}, fetch_list=[loss])
    print(json.dumps({"after_import": after_import, "graphc_dir": compilation_cache_dir(),
                      "jax_dir": jax.config.jax_compilation_cache_dir,
                      "loss": np.asarray(out).ravel().tolist()}))
""")


def _run(tmp_path: Path, **env_vars) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("GRAPHC_COMPILATION_CACHE", "JAX_COMPILATION_CACHE_DIR")}
    # JAX stores only compiles slower than 1 s by default; these programs compile faster.
    env.update(JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", JAX_PLATFORMS="cpu",
               XDG_CACHE_HOME=str(tmp_path / "xdg"), **env_vars)
    proc = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _entries(path: Path) -> set[str]:
    return {p.name for p in path.glob("*-cache")} if path.exists() else set()


def test_second_process_reuses_the_first_ones_compiles(tmp_path):
    cache = tmp_path / "cache"
    first = _run(tmp_path, GRAPHC_COMPILATION_CACHE=str(cache))
    assert first["after_import"] is None  # importing graphc sets nothing
    assert first["graphc_dir"] == first["jax_dir"] == str(cache)
    written = _entries(cache)
    assert written, "the first process wrote no compiled programs"
    second = _run(tmp_path, GRAPHC_COMPILATION_CACHE=str(cache))
    assert _entries(cache) == written  # every compile was found in the cache
    assert second["loss"] == first["loss"]


def test_default_directory_is_under_the_user_cache(tmp_path):
    result = _run(tmp_path)
    default = tmp_path / "xdg" / "graphc" / "jax"
    assert result["jax_dir"] == str(default)
    assert _entries(default)


def test_off_switch_and_the_users_own_directory(tmp_path):
    off = _run(tmp_path, GRAPHC_COMPILATION_CACHE="0")
    assert off["graphc_dir"] is None and off["jax_dir"] is None
    assert not (tmp_path / "xdg").exists()
    mine = tmp_path / "mine"
    result = _run(tmp_path, JAX_COMPILATION_CACHE_DIR=str(mine))
    assert result["graphc_dir"] is None and result["jax_dir"] == str(mine)
    assert _entries(mine) and not (tmp_path / "xdg").exists()
