"""Rules traced once per signature (backends/traced_rules.py): a step whose alike ops share one
trace lowers to the StableHLO the op-by-op trace gives (no XLA compile here, to stay fast)."""

import numpy as np
import pytest

import graphc
from graphc import layers
from graphc.backends import traced_rules
from graphc.runtime import hlo_text


def _build(make_opt):
    main, start = graphc.Program(), graphc.Program()
    main.random_seed = start.random_seed = 3
    with graphc.program_guard(main, start), graphc.unique_name.guard():
        x = graphc.data("image", [-1, 2, 6, 6], "float32")
        lab = graphc.data("label", [-1, 1], "int64")
        for _ in range(3):  # the last two convolutions and batch norms share their shapes
            x = layers.batch_norm(layers.conv2d(x, 3, 3, padding=1, bias_attr=False),
                                  act="relu")
        logits = layers.fc(layers.pool2d(x, global_pooling=True, pool_type="avg"), 3)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, lab))
        make_opt().minimize(loss)
    return main, start, loss


def _build_attention(make_opt):
    """Two equal blocks of the encoder's ops (fc, reshape2, transpose2, matmul, softmax,
    layer_norm, gelu): their gradients share traces."""
    main, start = graphc.Program(), graphc.Program()
    main.random_seed = start.random_seed = 3
    with graphc.program_guard(main, start), graphc.unique_name.guard():
        x = graphc.data("tokens", [-1, 4, 8], "float32")
        for _ in range(2):
            q = layers.transpose(layers.reshape(layers.fc(x, 8, num_flatten_dims=2),
                                                [0, 4, 2, 4]), [0, 2, 1, 3])
            k = layers.transpose(layers.reshape(layers.fc(x, 8, num_flatten_dims=2),
                                                [0, 4, 2, 4]), [0, 2, 1, 3])
            att = layers.softmax(layers.matmul(q, k, transpose_y=True, alpha=0.5))
            ctx = layers.reshape(layers.transpose(layers.matmul(att, q), [0, 2, 1, 3]),
                                 [0, 4, 8])
            x = layers.layer_norm(layers.gelu(layers.elementwise_add(x, ctx)),
                                  begin_norm_axis=2)
        loss = layers.mean(x)
        make_opt().minimize(loss)
    return main, start, loss


_FEEDS = {"image": {
    "image": np.random.default_rng(0).standard_normal((2, 2, 6, 6)).astype("float32"),
    "label": np.array([[0], [2]], "int64")},
    "tokens": {"tokens": np.random.default_rng(1).standard_normal((2, 4, 8)).astype("float32")}}
_MODELS = {"conv": (_build, "image"), "attention": (_build_attention, "tokens")}


def _lowered(model: str, make_opt) -> str:
    build, feed = _MODELS[model]
    main, start, loss = build(make_opt)
    exe = graphc.Executor()
    exe.run(start)
    text = exe.compile(main, feed=_FEEDS[feed], fetch_list=[loss]).lowered_text()
    return hlo_text.strip_locations(text)


@pytest.mark.parametrize(("model", "make_opt"), [
    ("conv", lambda: graphc.optimizer.Momentum(0.1, 0.9)),
    ("attention", lambda: graphc.optimizer.Adam(0.01))], ids=["conv-momentum", "attention-adam"])
def test_shared_traces_lower_as_op_by_op_tracing(model, make_opt, monkeypatch):
    shared_before = len(traced_rules._TRACES.entries)
    text = _lowered(model, make_opt)
    assert len(traced_rules._TRACES.entries) > shared_before  # the shared traces were used
    monkeypatch.setattr(traced_rules, "ONCE", frozenset())  # every rule traced op by op
    direct = _lowered(model, make_opt)
    assert text == direct, hlo_text.hlo_diff(text, direct)


def test_outside_a_trace_the_rule_runs_as_before():
    ins = {"Param": [np.ones(3, np.float32)], "Grad": [np.ones(3, np.float32)],
           "LearningRate": [np.full(1, 0.5, np.float32)]}
    assert traced_rules.apply_traced_once("sgd", {}, ins, {}, "sgd") is None
    assert traced_rules.apply_traced_once("relu", {}, ins, {}, "relu") is None
