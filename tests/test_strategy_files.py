"""Strategy files (TOML, JSON, prototxt, presets) that are broken in any way raise a
StrategyError naming the file and, where there is one, the line; never a raw Python error."""

from __future__ import annotations

import pytest
from graphc.presets import load_preset

from graphc import BuildStrategy, DistributedStrategy, ExecutionStrategy, StrategyError

LOADERS = {
    "build": BuildStrategy.load,
    "execution": ExecutionStrategy.load,
    "distributed": DistributedStrategy.load,
    "preset": load_preset,
}


@pytest.mark.parametrize("loader", sorted(LOADERS))
@pytest.mark.parametrize("name, content, message", [
    ("misspelt.toml", "[build_strategy]\nfuse_bn_act_ops = true\n[execution_strateg]\n"
                      "num_threads = 2\n",
     r"'execution_strateg' \(did you mean 'execution_strategy'\?\)"),
    ("scalar.toml", "build_strategy = 3\n", r"'build_strategy' must be a table of fields"),
    ("list.json", "[1, 2, 3]", r"a strategy file holds tables .*got a list"),
    ("number.json", "42", r"got a int"),
    ("scalar.json", '{"build_strategy": "fast"}', r"'build_strategy' must be a table of fields"),
    ("binary.toml", b"[build_strategy]\nfuse_bn_act_ops = \xff\xfe\n", r":2: not UTF-8 text"),
    ("deep.json", "[" * 200000 + "]" * 200000, r"nested too deeply|a strategy file holds"),
    ("bad.json", '{\n  "build_strategy": {\n    "fuse_bn_act_ops": tru\n}', r"bad.json:3: not "
                                                                            r"valid JSON"),
])
def test_broken_files_raise_strategy_errors_naming_the_file(tmp_path, loader, name, content,
                                                            message):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(StrategyError) as info:
        LOADERS[loader](str(path))
    assert name in str(info.value)
    info.match(message)


@pytest.mark.parametrize("loader", sorted(LOADERS))
def test_a_directory_is_not_a_strategy_file(tmp_path, loader):
    path = tmp_path / "dir.toml"
    path.mkdir()
    with pytest.raises(StrategyError, match="dir.toml' is a directory"):
        LOADERS[loader](str(path))
    plain = tmp_path / "strategies_dir"  # no suffix: a path, not a preset name
    plain.mkdir()
    with pytest.raises(StrategyError, match="strategies_dir' is a directory"):
        LOADERS[loader](str(plain))


def test_a_misspelt_table_in_a_preset_is_named(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text("[build_stratgy]\nfuse_bn_act_ops = true\n")
    with pytest.raises(StrategyError, match="build_stratgy"):
        load_preset(str(path))


def test_deeply_nested_prototxt_is_a_strategy_error_with_a_line(tmp_path):
    path = tmp_path / "deep.prototxt"
    path.write_text("amp: true\n" + "a {\n" * 5000 + "}\n" * 5000)
    with pytest.raises(StrategyError, match=r'deep.prototxt:2: .*no field named "a"'):
        DistributedStrategy.load_from_prototxt(str(path))


@pytest.mark.parametrize("content, message", [
    (b"amp: \xff\n", r"bad.prototxt:1: not UTF-8 text"),
    ("amp: true\namp_configs {\n  init_loss_scaling: 2.0\n", r"bad.prototxt:3: .*block is never "
                                                            r"closed"),
    ("amp_configs: 3\n", r"bad.prototxt:1: .*amp_configs"),
    ("nccl_comm_num {\n}\n", r"bad.prototxt:1: .*nccl_comm_num"),
])
def test_broken_prototxt_files(tmp_path, content, message):
    path = tmp_path / "bad.prototxt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(StrategyError, match=message):
        DistributedStrategy.load_from_prototxt(str(path))


def test_good_files_still_load(tmp_path):
    path = tmp_path / "ok.toml"
    path.write_text("[build_strategy]\nfuse_bn_act_ops = true\n[execution_strategy]\n"
                    "num_threads = 2\n")
    assert BuildStrategy.load(str(path)).fuse_bn_act_ops is True
    assert ExecutionStrategy.load(str(path)).num_threads == 2
    ds = DistributedStrategy()
    ds.amp = True
    ds.save_to_prototxt(tmp_path / "ok.prototxt")
    assert DistributedStrategy.load_from_prototxt(str(tmp_path / "ok.prototxt")).amp is True
