"""Checkpoints are never trusted blindly: per-tensor checksums, a checked manifest, cleanup of
interrupted saves' temporaries, the umask's permissions, and clear errors for bad targets."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest
from graphc.models import mlp

import graphc as fluid
from graphc.runtime import checkpoint


@pytest.fixture
def saved(tmp_path):
    """An MLP's persistables (random values, no step run) saved under tmp_path/ckpt."""
    model = mlp(input_dim=4, hidden=(3,), num_classes=2)
    scope = fluid.Scope()
    rng = np.random.default_rng(0)
    for var in checkpoint.persistables(model.main):
        scope[var.name] = rng.standard_normal(var.shape).astype(var.dtype)
    dirname = str(tmp_path / "ckpt")
    fluid.save(model.main, dirname, scope=scope)
    return model, scope, dirname


def snapshot(scope):
    return {k: np.array(scope[k]) for k in scope.keys()}


def tensor_byte_offset(path: str, name: str) -> int:
    """Where tensor ``name``'s data starts in a safetensors file (8-byte header size, JSON)."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    return 8 + size + header[name]["data_offsets"][0]


def test_round_trip_records_a_checksum_per_tensor(saved):
    model, scope, dirname = saved
    manifest = json.load(open(os.path.join(dirname, checkpoint.MANIFEST)))
    assert manifest["format"] == "graphc-checkpoint/2"
    for name, entry in manifest["tensors"].items():
        assert entry["sha256"] == checkpoint.tensor_checksum(scope[name])
    other = fluid.Scope()
    fluid.load(model.main, dirname, scope=other)
    for name in manifest["tensors"]:
        np.testing.assert_array_equal(other[name], scope[name])


def test_a_flipped_byte_is_refused_naming_file_and_tensor(saved):
    model, scope, dirname = saved
    path = os.path.join(dirname, checkpoint.TENSORS)
    offset = tensor_byte_offset(path, "fc_0.w_0") + 5
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x10]))
    target = fluid.Scope()
    target["fc_0.w_0"] = np.zeros((4, 3), "float32")
    before = snapshot(target)
    with pytest.raises(fluid.CheckpointError, match=r"persistables\.safetensors.*'fc_0\.w_0' "
                                                     r"is corrupt"):
        fluid.load(model.main, dirname, scope=target)
    assert snapshot(target).keys() == before.keys()
    np.testing.assert_array_equal(target["fc_0.w_0"], before["fc_0.w_0"])


@pytest.mark.parametrize("text, message", [
    (b"\x00\xff garbage", "is not a valid manifest"),
    (b"[1, 2, 3]", "is not a graphc checkpoint manifest"),
    (b'{"format": "something-else/9", "tensors": {}}', "is not a graphc checkpoint manifest"),
    (b'{"format": "graphc-checkpoint/2", "tensors": 7}', "'tensors' must map"),
    (b'{"format": "graphc-checkpoint/2", "tensors": {"fc_0.w_0": 1}}', "'tensors' must map"),
    (b"[" * 100000, "is not a valid manifest"),
])
def test_a_garbage_manifest_is_refused(saved, text, message):
    model, scope, dirname = saved
    with open(os.path.join(dirname, checkpoint.MANIFEST), "wb") as f:
        f.write(text)
    with pytest.raises(fluid.CheckpointError, match=message):
        fluid.load(model.main, dirname, scope=fluid.Scope())


def test_a_missing_manifest_is_refused(saved):
    model, scope, dirname = saved
    os.remove(os.path.join(dirname, checkpoint.MANIFEST))
    with pytest.raises(fluid.CheckpointError, match="has no manifest.json"):
        fluid.load(model.main, dirname, scope=fluid.Scope())


def test_a_manifest_from_another_save_is_refused(saved, tmp_path):
    model, scope, dirname = saved
    manifest = os.path.join(dirname, checkpoint.MANIFEST)
    old = open(manifest).read()
    scope["fc_0.w_0"] = scope["fc_0.w_0"] + 1
    fluid.save(model.main, dirname, scope=scope)
    open(manifest, "w").write(old)  # a save interrupted between its two renames
    with pytest.raises(fluid.CheckpointError, match="does not match its manifest entry"):
        fluid.load(model.main, dirname, scope=fluid.Scope())


def test_format_1_checkpoints_still_load(saved):
    """Checkpoints written before checksums (format /1) load; they cannot be verified."""
    from safetensors.numpy import save_file
    model, scope, dirname = saved
    tensors = {n: np.asarray(scope[n]) for n in scope.keys()}
    save_file(tensors, os.path.join(dirname, checkpoint.TENSORS),
              metadata={"format": "graphc-checkpoint/1"})
    json.dump({"format": "graphc-checkpoint/1", "tensors": {
        n: {"shape": list(a.shape), "dtype": str(a.dtype)} for n, a in tensors.items()}},
        open(os.path.join(dirname, checkpoint.MANIFEST), "w"))
    other = fluid.Scope()
    fluid.load(model.main, dirname, scope=other)
    np.testing.assert_array_equal(other["fc_0.w_0"], scope["fc_0.w_0"])


def test_the_next_save_removes_an_interrupted_saves_temporaries(saved):
    model, scope, dirname = saved
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    pid = int(dead.stdout)
    host = checkpoint._host()
    stale = os.path.join(dirname, f".tmp-{host}-{pid}-deadbeef")
    live = os.path.join(dirname, f".tmp-{host}-{os.getpid()}-cafe")  # a save in progress
    foreign = os.path.join(dirname, f".tmp-otherhost-{pid}-beef")  # another node's
    for path in (stale, live, foreign):
        open(path, "wb").write(b"x" * 1000)
    fluid.save(model.main, dirname, scope=scope)
    assert not os.path.exists(stale)
    assert os.path.exists(live) and os.path.exists(foreign)


def test_a_killed_save_leaves_the_previous_checkpoint_and_its_temporary_is_cleaned(
        saved, tmp_path):
    """kill -9 in the middle of writing: the old checkpoint still loads, the next save
    removes the half-written temporary."""
    model, scope, dirname = saved
    script = tmp_path / "slow_save.py"
    script.write_text(f"""
import os, signal
import numpy as np
from graphc.runtime import checkpoint
def write(tmp):
    open(tmp, "wb").write(b"partial")
    os.kill(os.getpid(), signal.SIGKILL)
checkpoint.atomic_write(os.path.join({dirname!r}, checkpoint.TENSORS), write)
""")
    proc = subprocess.run([sys.executable, str(script)], timeout=120)
    assert proc.returncode == -9
    leftovers = [n for n in os.listdir(dirname) if n.startswith(".tmp-")]
    assert len(leftovers) == 1
    other = fluid.Scope()
    fluid.load(model.main, dirname, scope=other)  # the previous checkpoint is intact
    fluid.save(model.main, dirname, scope=scope)
    assert not [n for n in os.listdir(dirname) if n.startswith(".tmp-")]


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_files_honour_the_umask(saved, tmp_path, umask, mode):
    model, scope, _ = saved
    old = os.umask(umask)
    try:
        dirname = str(tmp_path / f"u{umask:o}")
        fluid.save(model.main, dirname, scope=scope)
    finally:
        os.umask(old)
    for name in (checkpoint.TENSORS, checkpoint.MANIFEST):
        assert os.stat(os.path.join(dirname, name)).st_mode & 0o777 == mode


def test_saving_onto_a_plain_file_is_a_clear_error(saved, tmp_path):
    model, scope, _ = saved
    target = tmp_path / "not_a_dir"
    target.write_text("precious")
    with pytest.raises(fluid.CheckpointError, match="is a file, not a directory"):
        fluid.save(model.main, str(target), scope=scope)
    assert target.read_text() == "precious"
