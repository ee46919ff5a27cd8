"""The `graphc` command: compile and explain-buckets on the example model, errors as one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from graphc.cli import main

ROOT = Path(__file__).resolve().parent.parent
MODEL = str(ROOT / "examples" / "mlp_model.py")


def run_cli(capsys, *argv):
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_compile_reports_pipeline_and_timing(capsys):
    rc, out, _ = run_cli(capsys, "compile", MODEL, "--strategy", "fast-single-device",
                         "--timing")
    assert rc == 0
    assert "pipeline: dce," in out and "fuse-elewise-add-act" in out
    assert "changed by:" in out and "fuse-bn-act" in out
    assert "total" in out and "fused add->act: 1" in out  # the timing/statistics table


def test_compile_print_ir_after_change(capsys):
    rc, out, _ = run_cli(capsys, "compile", MODEL, "--strategy", "fast-single-device",
                         "--print-ir-after-change")
    assert rc == 0
    assert "// ----- IR after fuse-elewise-add-act -----" in out
    assert "// ----- IR after dce -----" not in out  # dce changes nothing here


def test_compile_print_ir_after_all_and_dump_dir_are_exclusive(capsys, tmp_path):
    rc, out, _ = run_cli(capsys, "compile", MODEL, "--print-ir-after-all")
    assert rc == 0 and "// ----- IR after dce -----" in out
    rc, out, _ = run_cli(capsys, "compile", MODEL, "--strategy", "debug",
                         "--dump-dir", str(tmp_path))
    assert rc == 0
    assert sorted(p.name for p in tmp_path.iterdir())[0] == "00-input.ir"
    with pytest.raises(SystemExit):
        main(["compile", MODEL, "--print-ir-after-all", "--dump-dir", str(tmp_path)])


def test_compile_with_a_strategy_path(capsys):
    rc, out, _ = run_cli(capsys, "compile", MODEL, "--strategy",
                         str(ROOT / "strategies" / "inference.toml"))
    assert rc == 0 and "strategy: inference" in out


def test_explain_buckets_in_process(capsys):
    # the test process has 8 CPU devices (conftest); --devices 4 uses the first 4
    rc, out, _ = run_cli(capsys, "explain-buckets", MODEL, "--strategy", "cpu-reduce",
                         "--devices", "4")
    assert rc == 0
    assert "4 devices" in out and "reduce_strategy=Reduce" in out
    assert "buckets" in out and "fc_0.w_0" in out


@pytest.mark.parametrize("argv, message", [
    (["compile", "no_such_model.py"], "model file 'no_such_model.py' does not exist"),
    (["compile", MODEL, "--strategy", "no-such-preset"], "no strategy preset 'no-such-preset'"),
    (["explain-buckets", MODEL, "--devices", "0"], "--devices must be >= 1"),
])
def test_errors_are_one_line(capsys, argv, message):
    rc, out, err = run_cli(capsys, *argv)
    assert rc == 1
    assert err.startswith("graphc: error: ") and message in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_model_without_build(capsys, tmp_path):
    model = tmp_path / "m.py"
    model.write_text("x = 1\n")
    rc, _, err = run_cli(capsys, "compile", str(model))
    assert rc == 1 and "defines no build() function" in err
    model.write_text("def build():\n    raise ValueError('bad model')\n")
    rc, _, err = run_cli(capsys, "compile", str(model))
    assert rc == 1 and "ValueError: bad model" in err and "Traceback" not in err
    with pytest.raises(ValueError, match="bad model"):  # --debug: the traceback
        main(["--debug", "compile", str(model)])


def test_help_documents_the_model_convention(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for text in ("compile", "explain-buckets", "launch", "build()",
                 "(main_program, startup_program, loss)", "cpu-reduce"):
        assert text in out


def test_explain_buckets_sets_devices_in_a_fresh_process():
    # a fresh process: the CLI configures 4 CPU devices before JAX starts
    env = {k: v for k, v in os.environ.items() if k != "CPU_NUM"}
    proc = subprocess.run([sys.executable, "-m", "graphc", "explain-buckets", MODEL,
                           "--strategy", "default", "--devices", "4", "--hlo"],
                          capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "4 devices" in proc.stdout
    assert "8 stablehlo.all_reduce" in proc.stdout  # one per parameter: no fusion in default
