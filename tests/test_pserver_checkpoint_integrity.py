"""A parameter server's checkpoint carries graphc.save's guarantees (issue 27): a sha256 per
tensor, checked metadata, table rows checked (distinct ids, in range, this server's), blocks
of the program's dtype and shape, the umask's permissions, and a PServerCheckpointError naming
the file for every damaged input, with nothing loaded. Probed as the issue did: flip a bit,
duplicate an id, retype a block, truncate a file (no MPI: the server's save and load run in
this process on the server program of a 2-server transpile)."""

from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

import graphc.fluid as fluid
from graphc.distributed import pserver
from graphc.distributed.pserver.checkpoint import (
    META,
    PServerCheckpointError,
    save_meta,
    save_server,
    server_file,
    state_names,
)
from graphc.distributed.pserver.protocol import PServerError
from graphc.runtime.checkpoint import CheckpointError

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
import pserver_sparse_job as job  # noqa: E402

sys.path.pop(0)
SERVER = 1  # the second of 2 servers: it owns the odd ids of the distributed table
TABLE = "ctr_table"


class Shard:
    """What save_server reads of a RowTable: its state (no rows drawn, no JAX)."""

    def __init__(self, ids, rows):
        self.ids, self.rows = ids, rows

    def state(self):
        return {f"{TABLE}@IDS": self.ids, f"{TABLE}@ROWS": self.rows}


@pytest.fixture(scope="module")
def program():
    with fluid.unique_name.guard():
        main, startup, _ = job.build()
    t = fluid.DistributeTranspiler()
    t.transpile(0, program=main, pservers=job.ENDPOINTS, trainers=job.TRAINERS,
                startup_program=startup)
    server, _ = t.get_pserver_programs(job.ENDPOINTS.split(",")[SERVER])
    assert server.info.server_id == SERVER and [s["name"] for s in server.info.tables] == [TABLE]
    return server


def values(program, seed=0):
    rng = np.random.default_rng(seed)
    block = program.global_block()
    return {n: rng.standard_normal(block.var(n).shape).astype(block.var(n).dtype)
            for n in state_names(program)}


def shard(ids=(1, 7, 999_999, 12345)):
    ids = np.array(ids, np.int64)
    return Shard(ids, np.arange(len(ids) * job.WIDTH, dtype="float32").reshape(-1, job.WIDTH)
                 * 0.093)


def save(program, dirname, arrays=None, table=None, server_id=SERVER, meta=None):
    scope = fluid.Scope()
    for name, arr in (values(program) if arrays is None else arrays).items():
        scope[name] = arr
    path = save_server(dirname, program, scope, server_id, {TABLE: table or shard()})
    save_meta(dirname, **(meta or {"step": 2, "servers": 2, "trainers": 2}))
    return path


def load(program, dirname):
    """load_checkpoint into a fresh scope: returns (meta, scope, loaded tables)."""
    scope = fluid.Scope()
    program.loaded_tables = None
    meta = pserver.load_checkpoint(program, str(dirname), scope=scope)
    return meta, scope, program.loaded_tables


def refused(program, dirname, match):
    """The load fails with a PServerCheckpointError naming what ``match`` says, and leaves
    the scope empty."""
    scope = fluid.Scope()
    program.loaded_tables = None
    with pytest.raises(PServerCheckpointError, match=match) as info:
        pserver.load_checkpoint(program, str(dirname), scope=scope)
    assert list(scope.keys()) == [] and program.loaded_tables is None
    # graphc's checkpoint error and the parameter server's, both
    assert isinstance(info.value, CheckpointError) and isinstance(info.value, PServerError)
    return str(info.value)


def byte_offset(path, name: str) -> int:
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    return 8 + size + header[name]["data_offsets"][0]


def rewrite(path, change) -> None:
    """Write the server file again, its tensors changed by ``change`` (with checksums and
    the server's header: only what ``change`` did is wrong)."""
    from safetensors import safe_open

    from graphc.runtime.checkpoint import write_tensors
    with safe_open(str(path), framework="numpy") as f:
        header = {"pserver": f.metadata()["pserver"]}
        arrays = {n: f.get_tensor(n) for n in f.keys()}
    write_tensors(str(path), change(arrays), header)


def flip(path, name: str, at: int = 3, bit: int = 6) -> None:
    data = bytearray(Path(path).read_bytes())
    data[byte_offset(path, name) + at] ^= 1 << bit
    Path(path).write_bytes(bytes(data))


# -- round trip and permissions --------------------------------------------------------------
@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o027, 0o640)])
def test_round_trip_and_files_take_the_umask_s_permissions(program, tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        path = save(program, tmp_path)
    finally:
        os.umask(old)
    for f in (path, tmp_path / META):
        assert f.stat().st_mode & 0o777 == mode, (f, oct(f.stat().st_mode))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([META, path.name])  # no temporaries
    meta, scope, tables = load(program, tmp_path)
    assert meta == {"step": 2, "servers": 2, "trainers": 2}
    for name, arr in values(program).items():
        np.testing.assert_array_equal(np.asarray(scope[name]), arr)
    np.testing.assert_array_equal(tables.arrays[f"{TABLE}@IDS"], shard().ids)
    np.testing.assert_array_equal(tables.arrays[f"{TABLE}@ROWS"], shard().rows)


# -- a flipped bit ---------------------------------------------------------------------------
def test_a_flipped_bit_in_a_block_or_a_table_row_is_refused(program, tmp_path):
    block = state_names(program)[0]
    for i, name in enumerate([block, f"{TABLE}@ROWS", f"{TABLE}@IDS"]):
        path = save(program, tmp_path / str(i))
        flip(path, name)
        message = refused(program, tmp_path / str(i), f"tensor '{name}' is corrupt")
        assert str(path) in message


# -- table rows ------------------------------------------------------------------------------
@pytest.mark.parametrize("ids, match", [
    ((1, 7, 7), r"lists ids twice: \[7\]"),
    ((1, -1), r"has ids outside \[0, 1000000\): \[-1\]"),
    ((1, 1_000_001), r"has ids outside \[0, 1000000\): \[1000001\]"),
    ((1, 8), r"has ids of another server \(id % 2 != 1\): \[8\]"),
])
def test_table_rows_with_bad_ids_are_refused(program, tmp_path, ids, match):
    save(program, tmp_path, table=shard(ids))
    message = refused(program, tmp_path, match)
    assert f"'{server_file(tmp_path, SERVER)}': table '{TABLE}'" in message


def test_table_rows_of_another_type_or_shape_are_refused(program, tmp_path):
    good = shard()
    cases = [(Shard(good.ids.astype(np.int32), good.rows), "has ids of int32"),
             (Shard(good.ids, good.rows.astype(np.float64)), r"has rows float64\[4, 8\]"),
             (Shard(good.ids, good.rows[:3]), r"has rows float32\[3, 8\] for 4 ids")]
    for i, (table, match) in enumerate(cases):
        save(program, tmp_path / str(i), table=table)
        refused(program, tmp_path / str(i), match)


# -- blocks ----------------------------------------------------------------------------------
def test_a_block_retyped_or_reshaped_is_refused(program, tmp_path):
    arrays = values(program)
    name = next(n for n, a in arrays.items() if a.dtype == np.float32 and a.size > 1)
    retyped = dict(arrays, **{name: arrays[name].astype(np.int32)})
    save(program, tmp_path / "a", arrays=retyped)
    refused(program, tmp_path / "a", rf"'{name}' is int32\[.*\], the program declares float32")
    reshaped = dict(arrays, **{name: arrays[name].reshape(-1)[1:]})
    save(program, tmp_path / "b", arrays=reshaped)
    refused(program, tmp_path / "b", rf"'{name}' is float32\[")
    path = save(program, tmp_path / "c")
    rewrite(path, lambda a: dict(a, stray=np.zeros(2, np.float32)))
    refused(program, tmp_path / "c", r"holds \['stray'\], unknown to this server's program")
    rewrite(path, lambda a: {n: v for n, v in a.items() if n not in (name, "stray")})
    refused(program, tmp_path / "c", rf"lacks \['{name}'\]")


# -- metadata --------------------------------------------------------------------------------
def test_another_server_s_file_is_refused(program, tmp_path):
    save(program, tmp_path, server_id=0, table=shard((0, 2)))
    os.replace(server_file(tmp_path, 0), server_file(tmp_path, SERVER))
    refused(program, tmp_path, "was saved by server 0 of 2, not server 1 of 2")


def test_a_file_without_graphc_s_header_or_checksums_is_refused(program, tmp_path):
    from safetensors.numpy import save_file
    path = save(program, tmp_path)
    arrays = {**values(program), **shard().state()}
    save_file(arrays, str(path))  # a plain safetensors file: no checksums
    refused(program, tmp_path, "has no recorded checksum")
    from graphc.runtime.checkpoint import write_tensors
    write_tensors(str(path), arrays)  # checksums, but not a server's header
    refused(program, tmp_path, "is not a graphc parameter-server checkpoint")


@pytest.mark.parametrize("text, match", [
    ("", "is not a valid checkpoint step file"),
    ('{"step": 2', "is not a valid checkpoint step file"),
    (b"\xff\xfe", "is not a valid checkpoint step file"),
    ("[1, 2]", "is not a graphc parameter-server step file"),
    ('{"step": 2, "servers": 2, "trainers": 2}', "is not a graphc parameter-server step file"),
    ('{"format": "graphc-pserver-checkpoint/1", "step": -1, "servers": 2, "trainers": 2}',
     r"'step' must be a whole number >= 0, got -1"),
    ('{"format": "graphc-pserver-checkpoint/1", "step": "2", "servers": 2, "trainers": 2}',
     r"'step' must be a whole number >= 0, got '2'"),
    ('{"format": "graphc-pserver-checkpoint/1", "step": true, "servers": 2, "trainers": 2}',
     r"'step' must be a whole number >= 0, got True"),
    ('{"format": "graphc-pserver-checkpoint/1", "step": 2, "servers": 0, "trainers": 2}',
     r"'servers' must be a whole number >= 1, got 0"),
    ('{"format": "graphc-pserver-checkpoint/1", "step": 2, "servers": 2, "trainers": 2.5}',
     r"'trainers' must be a whole number >= 1, got 2.5"),
    ('{"format": "graphc-pserver-checkpoint/1", "step": 2, "servers": 3, "trainers": 2}',
     "was saved by a job of 3 servers, this one has 2"),
])
def test_a_bad_step_file_is_refused_naming_it(program, tmp_path, text, match):
    save(program, tmp_path)
    meta = tmp_path / META
    meta.write_bytes(text if isinstance(text, bytes) else text.encode())
    message = refused(program, tmp_path, match)
    assert META in message


# -- truncated and empty files ---------------------------------------------------------------
@pytest.mark.parametrize("keep", [0, 7, 100, "half", -1])
def test_a_truncated_or_empty_server_file_is_a_typed_error_naming_it(program, tmp_path, keep):
    path = save(program, tmp_path)
    data = path.read_bytes()
    cut = {"half": len(data) // 2, -1: len(data) - 1}.get(keep, keep)
    path.write_bytes(data[:cut])
    message = refused(program, tmp_path, "cannot read")
    assert str(path) in message


def test_a_missing_server_file_or_step_file_is_a_typed_error(program, tmp_path):
    save(program, tmp_path)
    server_file(tmp_path, SERVER).unlink()
    refused(program, tmp_path, f"has no file for server {SERVER}")
    (tmp_path / META).unlink()
    refused(program, tmp_path, f"holds no parameter-server checkpoint \\({META}\\)")
