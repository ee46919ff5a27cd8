"""Front-end API odds and ends: the demo command, reference models, notebook display,
Variable operators, lowering errors and Graph.to_program's renaming of live versions."""

from __future__ import annotations

import pytest
from graphc.cli import main as cli_main
from graphc.models import demo_cnn, mlp

import graphc as fluid
from graphc import layers


def test_demo_command_prints_ir_and_statistics(capsys):
    assert cli_main(["demo", "--ir", "--epochs", "0"]) == 0
    out = capsys.readouterr().out
    assert "graph @main {" in out
    assert "= batch_norm(X=" in out
    assert "%batch_norm_0.w_1#1" in out  # running mean comes back as a new version
    stats = dict(line.split() for line in out.split("op statistics (forward program):\n")[1]
                 .split("\n")[:10])
    assert stats["conv2d"] == "2" and stats["batch_norm"] == "2" and stats["mul"] == "1"


def test_demo_command_trains(capsys):
    assert cli_main(["demo", "--epochs", "2", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "epoch 2/2: train loss" in out
    accuracy = float(out.split("test accuracy ")[1].split()[0])
    assert accuracy > 0.8  # two epochs on the digits reach ~0.95; chance is 0.1


def test_cli_reports_errors_in_one_line(capsys, monkeypatch):
    import graphc.models

    def broken(**kwargs):
        raise fluid.ShapeError("conv2d: input must be 4-D\nsecond line")

    monkeypatch.setattr(graphc.models, "demo_cnn", broken)
    assert cli_main(["demo"]) == 1
    err = capsys.readouterr().err
    assert err.strip() == "graphc: error: ShapeError: conv2d: input must be 4-D"
    with pytest.raises(fluid.ShapeError):
        cli_main(["--debug", "demo"])


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_demo_cnn_lowers_and_verifies(layout):
    model = demo_cnn(data_layout=layout)
    g = fluid.lower(model.main).verify()
    assert g.stats()["conv2d"] == 2
    assert [v.name for v in model.feeds] == ["image", "label"]
    assert fluid.parse(g.to_text()).structurally_equal(g)


def test_mlp_names_follow_paddle():
    model = mlp(hidden=(8, 8))
    names = [p.name for p in model.main.all_parameters()]
    assert names[:6] == ["fc_0.w_0", "fc_0.b_0", "batch_norm_0.w_0", "batch_norm_0.b_0",
                         "batch_norm_0.w_1", "batch_norm_0.w_2"]
    assert model.loss.shape == (1,)


def test_notebook_display():
    x = fluid.data("x", [-1, 3])
    layers.relu(x)
    g = fluid.lower(fluid.default_main_program())
    html = g._repr_html_()
    assert html.startswith("<pre") and "<b>relu</b>" in html and "test_program_api.py" in html

    class Printer:
        def __init__(self):
            self.parts = []

        def text(self, s):
            self.parts.append(s)

    p = Printer()
    g._repr_pretty_(p, cycle=False)
    assert p.parts == [g.to_text(show_source=True)]


def test_variable_operators_build_paddle_ops():
    x = fluid.data("x", [-1, 4])
    y = fluid.data("y", [-1, 4])
    z = -((x + y) * 2 - 1) / 4
    w = 3 - z
    block = fluid.default_main_program().global_block()
    assert [op.type for op in block.ops] == ["elementwise_add", "scale", "scale", "scale",
                                             "scale", "scale"]
    assert [op.attr("scale") for op in block.ops[1:]] == [2.0, 1.0, -1.0, 0.25, -1.0]
    assert [op.attr("bias") for op in block.ops[1:]] == [0.0, -1.0, 0.0, 0.0, 3.0]
    assert w.shape == (-1, 4)
    with pytest.raises(fluid.ProgramError, match="by the constant 0"):
        x / 0
    with pytest.raises(TypeError):
        x + "a"


def test_lowering_rejects_reading_an_unwritten_temporary():
    block = fluid.default_main_program().global_block()
    tmp = block.create_var("tmp", [2, 3])
    layers.relu(tmp)
    with pytest.raises(fluid.ProgramError, match=r"op relu at .*test_program_api.py:\d+.*'tmp'"):
        fluid.lower(fluid.default_main_program())


def test_data_and_program_guard_errors():
    with pytest.raises(fluid.ProgramError, match="shape must be a list"):
        fluid.data("x", 5)
    fluid.data("x", [None, 2])
    assert fluid.default_main_program().global_block().var("x").shape == (-1, 2)
    with pytest.raises(fluid.ProgramError, match="already declared"):
        fluid.data("x", [-1, 2], lod_level=1)
    with pytest.raises(fluid.ProgramError, match="expects a Program"):
        with fluid.program_guard("main"):
            pass
    with pytest.raises(fluid.ProgramError, match="invalid variable name") as info:
        fluid.data("bad name", [-1])
    assert "[ ] { } =" in str(info.value)  # the characters as written, not '{{ }}'


def test_to_program_renames_a_version_written_while_the_old_one_is_live():
    g = fluid.parse("""
graph @main {
  input %x: f32[-1,4] {feed}
  input %s: f32[4] {persistable}
  %s#1: f32[4] = scale(X=%s) {scale=2.0}
  %y: f32[-1,4] = elementwise_add(X=%x, Y=%s)
  output %s#1
}
""").verify()
    prog = g.to_program()
    ops = prog.global_block().ops
    assert [op.type for op in ops] == ["scale", "elementwise_add", "assign"]
    assert ops[0].output("Out") == ["s.ssa_1"]
    assert ops[1].input("Y") == ["s"]  # still the old value
    assert ops[2].input("X") == ["s.ssa_1"] and ops[2].output("Out") == ["s"]
    back = fluid.lower(prog).verify()
    assert back.latest("s").producer.type == "assign"


def test_to_program_keeps_names_when_versions_do_not_overlap():
    model = demo_cnn()
    g = fluid.lower(model.main)
    prog = g.to_program()
    assert [op.type for op in prog.global_block().ops] == \
        [op.type for op in model.main.global_block().ops]
    assert fluid.lower(prog).structurally_equal(g, check_source=True)


def test_graph_queries():
    model = demo_cnn()
    g = fluid.lower(model.main)
    mean = g.latest("batch_norm_0.w_1")
    assert mean.name == "batch_norm_0.w_1#1" and mean.producer.type == "batch_norm"
    conv = g.value("conv2d_0.tmp_0")
    assert [op.type for op, slot, pos in conv.users] == ["batch_norm"]
    assert conv.users[0][1:] == ("X", 0)
    with pytest.raises(fluid.ProgramError, match="no value"):
        g.value("nope")
    assert repr(g).startswith("<Graph @main: 14 ops")


def test_parse_comments_and_random_seed():
    text = """// a comment line
graph @net(random_seed=7) {
  input %x: f32[2] {feed}
  // another
  %y: f32[2] = relu(X=%x)
}
"""
    g = fluid.parse(text)
    assert g.random_seed == 7 and g.name == "net"
    assert g.to_text() == "graph @net(random_seed=7) {\n  input %x: f32[2] {feed}\n" \
                          "  %y: f32[2] = relu(X=%x)\n}\n"


@pytest.mark.parametrize("make_opt", [lambda: fluid.optimizer.SGD(0.1),
                                      lambda: fluid.optimizer.Momentum(0.1, 0.9),
                                      lambda: fluid.optimizer.Adam(0.01)])
def test_ops_appended_unchecked_by_minimize_verify(make_opt):
    """Backward and the optimizers append grad and init ops without append_op's checks;
    the verifier (slots, attributes, inferred types) must find them all valid."""
    model = demo_cnn(image_shape=(1, 8, 8), channels=(2, 3))
    with fluid.program_guard(model.main, model.startup):
        make_opt().minimize(model.loss)
    fluid.lower(model.main).verify()
    fluid.lower(model.startup).verify()
    roles = {op.role for op in model.main.global_block().ops}
    assert roles == {"forward", "backward", "optimize"}
