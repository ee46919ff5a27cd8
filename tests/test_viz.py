"""graphc.viz: DOT with clusters, colours and highlights; the text view used without `dot`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import graphc
from graphc import viz
from graphc.passes import PassManager, make_pass

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import mlp_model  # noqa: E402


def fused_graph():
    main, _, loss = mlp_model.build()
    graph = graphc.lower(main)
    PassManager([make_pass("fuse-elewise-add-act")]).run(graph, keep=[graph.latest(loss.name)])
    return graph


def test_dot_source_has_layers_colours_and_highlights():
    graph = fused_graph()
    drawing = viz.draw(graph)
    changed = viz.rewritten_ops(graph)
    assert len(changed) == 2  # the fused op and its fused grad op
    assert {graph.ops_by_id[i].type for i in changed} == {
        "fused_elemwise_activation", "fused_elemwise_activation_grad"}
    src = drawing.source
    assert 'subgraph "cluster_fc_0"' in src and 'subgraph "cluster_batch_norm_0"' in src
    assert src.count(viz.HIGHLIGHT) >= 2 * 2  # border and font colour of each changed op
    assert viz.KIND_COLOURS["matmul"] in src and viz.KIND_COLOURS["optimizer"] in src
    assert "feed0" in src  # the feed %x has a node


def test_explicit_changed_set_and_grad_ops_join_their_layer():
    graph = fused_graph()
    mul = next(op for op in graph.ops() if op.type == "mul")
    drawing = viz.draw(graph, changed=[mul])
    assert drawing.changed == {mul.id}
    grads = [op for op in graph.ops() if op.type == "mul_grad"]
    assert {viz.layer_of(op) for op in grads} == {"fc_0", "fc_1", "fc_2"}


def test_text_fallback_without_dot(monkeypatch):
    monkeypatch.setattr(viz.shutil, "which", lambda name: None)
    assert not viz.dot_available()
    drawing = viz.draw(fused_graph(), title="after")
    assert drawing._repr_svg_() is None  # Jupyter then shows the text view
    text = repr(drawing)
    assert text == str(drawing) and text.startswith("after: ")
    assert "[fc_1]" in text and "* fused_elemwise_activation " in text
    assert "[elementwise_add+relu by fuse-elewise-add-act]" in text
    with pytest.raises(RuntimeError, match="dot"):
        drawing.svg()


def test_svg_when_dot_is_installed():
    if not viz.dot_available():
        pytest.skip("Graphviz's dot is not installed here (the text view is tested above)")
    svg = viz.draw(fused_graph())._repr_svg_()
    assert svg is not None and "<svg" in svg and "fused_elemwise_activation" in svg


def test_a_few_hundred_ops():
    with graphc.unique_name.guard():
        main, startup = graphc.Program(), graphc.Program()
        with graphc.program_guard(main, startup):
            x = graphc.data("x", [-1, 8], "float32")
            for _ in range(40):
                x = graphc.layers.fc(x, 8, act="relu")
            loss = graphc.layers.mean(x)
            graphc.optimizer.SGD(0.1).minimize(loss)
    graph = graphc.lower(main)
    drawing = viz.draw(graph)
    assert graph.num_ops > 300
    assert drawing.source.count("subgraph") == 41  # 40 fc layers and the mean
    assert "label=\"fc_0.tmp_0\"" not in drawing.source  # no edge labels on big graphs
    assert "nslimit=2" in drawing.source  # bounded layout effort: seconds, not minutes
