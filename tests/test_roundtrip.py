"""Text and Program round trips: every layer's IR prints, parses back equal and reprints
identically; Graph.to_program lowers back to the same graph; malformed text is rejected."""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

import graphc
from graphc import ParamAttr, layers, unique_name
from graphc.testing import random_programs

THIS_FILE = os.path.basename(__file__)


def assert_text_round_trips(g: graphc.Graph) -> None:
    """parse(print(g)) equals g and prints the same text, with and without source lines."""
    g.verify()
    for show_source in (True, False):
        text = g.to_text(show_source=show_source)
        g2 = graphc.parse(text)
        g2.verify()
        assert g2.to_text(show_source=show_source) == text
        # without loc(...) the parsed ops have no source, so only compare sources when shown
        assert g2.structurally_equal(g, check_source=show_source), text
        if not show_source:
            assert all(op.source is None for op in g2.ops_by_id.values())


def assert_program_round_trips(g: graphc.Graph) -> None:
    back = graphc.lower(g.to_program())
    back.verify()
    assert back.structurally_equal(g, check_source=True)
    assert back.to_text(show_source=True) == g.to_text(show_source=True)


# ------------------------------------------------------------------ one case per layer use
# Each case builds into the fresh default programs (see conftest.py). ``CASES`` maps a case
# id to (the graphc.layers function it exercises, the builder).
CASES: dict[str, tuple[str, object]] = {}


def case(layer: str, id: str | None = None):
    def register(fn):
        key = id or layer
        assert key not in CASES, key
        CASES[key] = (layer, fn)
        return fn
    return register


def image(shape=(-1, 4, 6, 6), name="img", dtype="float32"):
    return graphc.data(name, list(shape), dtype)


def labels(name="label", shape=(-1, 1)):
    return graphc.data(name, list(shape), "int64")


@case("data")
def _data():
    graphc.data("x", [-1, 3])
    graphc.data("words", [None, 1], "int64", lod_level=1)
    graphc.data("fixed", [2, 3], "float64")


@case("fc")
def _fc():
    layers.fc(graphc.data("x", [-1, 6]), 4, act="relu")


@case("fc", "fc_multi_input")
def _fc_multi():
    a, b = graphc.data("a", [-1, 3]), graphc.data("b", [-1, 2, 2])
    layers.fc([a, b], 5, param_attr=[ParamAttr(learning_rate=0.5), None], act="tanh")


@case("fc", "fc_flatten2_no_bias_frozen")
def _fc_flatten():
    layers.fc(graphc.data("x", [-1, 2, 3]), 4, num_flatten_dims=2, bias_attr=False,
              param_attr=ParamAttr(name="frozen_w", trainable=False))


@case("conv2d")
def _conv2d():
    layers.conv2d(image(), 8, 3, stride=2, padding=1, act="relu")


@case("conv2d", "conv2d_nhwc")
def _conv2d_nhwc():
    layers.conv2d(image((-1, 6, 6, 4)), 3, [3, 2], padding=[1, 0], data_format="NHWC")


@case("conv2d", "conv2d_depthwise")
def _conv2d_depthwise():
    layers.conv2d(image(), 8, 3, groups=4, padding=1, bias_attr=False)


@case("conv2d", "conv2d_grouped_dilated")
def _conv2d_grouped():
    layers.conv2d(image(), 6, 2, groups=2, dilation=2)


@case("conv2d", "conv2d_same_padding")
def _conv2d_same():
    layers.conv2d(image(), 2, 3, stride=2, padding="SAME")


@case("conv2d", "conv2d_valid_padding_nhwc")
def _conv2d_valid():
    layers.conv2d(image((-1, 5, 5, 2)), 2, 2, padding="VALID", data_format="NHWC")


@case("pool2d")
def _pool2d():
    layers.pool2d(image(), 2, "max", 2)


@case("pool2d", "pool2d_avg_same_padding")
def _pool2d_same():
    layers.pool2d(image((-1, 3, 5, 5)), 3, "avg", 2, "SAME", exclusive=False)


@case("pool2d", "pool2d_global_nhwc")
def _pool2d_global():
    layers.pool2d(image((-1, 5, 5, 3)), pool_type="avg", global_pooling=True,
                  data_format="NHWC")


@case("pool2d", "pool2d_ceil_mode")
def _pool2d_ceil():
    layers.pool2d(image((-1, 2, 5, 5)), 2, pool_stride=2, pool_padding=[1, 0], ceil_mode=True)


# -- issue 24: nn layers (conv/pool 3-D and transposed, norms, resize)
@case("conv2d_transpose")
def _conv2d_transpose():
    layers.conv2d_transpose(image(), 3, output_size=[12, 12], filter_size=3, stride=2,
                            padding=1, act="relu")


@case("conv2d_transpose", "conv2d_transpose_depthwise_nhwc")
def _conv2d_transpose_dw():
    layers.conv2d_transpose(image((-1, 5, 5, 4)), 4, filter_size=2, groups=4,
                            use_cudnn=False, data_format="NHWC")


@case("conv3d")
def _conv3d():
    layers.conv3d(image((-1, 2, 4, 4, 4)), 3, 3, padding=1, groups=1)


@case("conv3d_transpose")
def _conv3d_transpose():
    layers.conv3d_transpose(image((-1, 2, 3, 3, 3)), 2, filter_size=2, stride=2)


@case("pool3d")
def _pool3d():
    layers.pool3d(image((-1, 2, 4, 4, 4)), 2, "avg", 2, ceil_mode=True)


@case("adaptive_pool2d")
def _adaptive_pool2d():
    layers.adaptive_pool2d(image(), [2, 3], "avg")


@case("adaptive_pool2d", "adaptive_pool2d_with_index")
def _adaptive_pool2d_with_index():
    layers.adaptive_pool2d(image(), 3, require_index=True)


@case("adaptive_pool3d")
def _adaptive_pool3d():
    layers.adaptive_pool3d(image((-1, 2, 4, 4, 4)), 2)


@case("instance_norm")
def _instance_norm():
    layers.instance_norm(image())


@case("group_norm")
def _group_norm():
    layers.group_norm(image(), 2, act="relu")


@case("lrn")
def _lrn():
    layers.lrn(image(), n=3)


@case("affine_channel")
def _affine_channel():
    scale = layers.fill_constant([4], "float32", 2.0)
    layers.affine_channel(image(), scale, layers.fill_constant([4], "float32", 0.5))


@case("image_resize")
def _image_resize():
    layers.image_resize(image(), scale=1.5, resample="NEAREST", align_corners=False)


@case("resize_bilinear")
def _resize_bilinear():
    layers.resize_bilinear(image(), [3, 9], align_corners=False, align_mode=0)


@case("resize_nearest")
def _resize_nearest():
    layers.resize_nearest(image(), [12, 12])


@case("resize_trilinear")
def _resize_trilinear():
    layers.resize_trilinear(image((-1, 2, 3, 3, 3)), [4, 5, 6])


@case("image_resize_short")
def _image_resize_short():
    layers.image_resize_short(image((-1, 3, 8, 12)), 4)


@case("dice_loss")
def _dice_loss():
    layers.dice_loss(layers.softmax(graphc.data("p", [-1, 3, 4])), labels(shape=(-1, 3, 1)))


@case("temporal_shift")
def _temporal_shift():
    layers.temporal_shift(image(), seg_num=2, shift_ratio=0.2)


@case("unfold")
def _unfold():
    layers.unfold(image(), [2, 3], strides=2, paddings=[1, 0], dilations=1)


@case("bilinear_tensor_product")
def _bilinear_tensor_product():
    layers.bilinear_tensor_product(graphc.data("a", [-1, 3]), graphc.data("b", [-1, 2]), 4,
                                   act="sigmoid")


# -- issue 24: nn tail (data_norm, spectral_norm, inplace_abn, lstm, hash, cvm, counter)
@case("data_norm")
def _data_norm():
    layers.data_norm(graphc.data("dn", [-1, 6]), act="relu", slot_dim=3,
                     enable_scale_and_shift=True)


@case("spectral_norm")
def _spectral_norm():
    layers.spectral_norm(graphc.data("sw", [4, 3, 2]), dim=1, power_iters=2)


@case("inplace_abn")
def _inplace_abn():
    layers.inplace_abn(image(), act="leaky_relu", act_alpha=0.1)


@case("lstm")
def _lstm():
    x = graphc.data("seq", [5, -1, 3])
    h0 = graphc.data("h0", [4, -1, 2])
    c0 = graphc.data("c0", [4, -1, 2])
    layers.lstm(x, h0, c0, 5, 2, 2, dropout_prob=0.2, is_bidirec=True)


@case("hash")
def _hash():
    layers.hash(graphc.data("ids", [-1, 2], "int64"), hash_size=1000, num_hash=2)


@case("continuous_value_model")
def _continuous_value_model():
    layers.continuous_value_model(graphc.data("emb", [-1, 5]), graphc.data("cv", [-1, 2]))


@case("filter_by_instag")
def _filter_by_instag():
    layers.filter_by_instag(graphc.data("ins", [-1, 3]),
                            graphc.data("itag", [-1, 1], "int64", lod_level=1),
                            graphc.data("ftag", [-1], "int64"), False, out_val_if_empty=-1)


@case("load")
def _load():
    out = graphc.default_main_program().global_block().create_var("loaded", [2, 3], "float32")
    layers.load(out, "/tmp/graphc-roundtrip-never-read.bin")


@case("autoincreased_step_counter")
def _autoincreased_step_counter():
    layers.autoincreased_step_counter(begin=3, step=2)


@case("batch_norm")
def _batch_norm():
    layers.batch_norm(image(), act="relu")


@case("batch_norm", "batch_norm_nhwc")
def _batch_norm_nhwc():
    layers.batch_norm(image((-1, 5, 5, 3)), data_layout="NHWC", momentum=0.5, epsilon=1e-3)


@case("batch_norm", "batch_norm_test_2d")
def _batch_norm_test():
    layers.batch_norm(graphc.data("x", [-1, 7]), is_test=True, use_global_stats=True)


@case("layer_norm")
def _layer_norm():
    layers.layer_norm(graphc.data("x", [-1, 3, 4]), begin_norm_axis=2, act="relu")


@case("layer_norm", "layer_norm_without_scale")
def _layer_norm_no_scale():
    layers.layer_norm(graphc.data("x", [-1, 3, 4]), scale=False)


@case("layer_norm", "layer_norm_without_scale_or_shift")
def _layer_norm_bare():
    layers.layer_norm(graphc.data("x", [-1, 6]), scale=False, shift=False, epsilon=1e-3)


@case("dropout")
def _dropout():
    layers.dropout(graphc.data("x", [-1, 6]), 0.5)


@case("dropout", "dropout_seeded_upscale")
def _dropout_seeded():
    layers.dropout(graphc.data("x", [-1, 6]), 0.25, is_test=True, seed=3,
                   dropout_implementation="upscale_in_train")


@case("embedding")
def _embedding():
    layers.embedding(labels("ids", (-1, 3, 1)), [10, 4], is_sparse=True, padding_idx=-1)


@case("merge_selected_rows")
def _merge_selected_rows():
    ids = labels("ids", (-1, 1))
    (_, grad), = graphc.append_backward(layers.mean(layers.embedding(ids, [10, 4],
                                                                     is_sparse=True)))
    layers.merge_selected_rows(grad)


@case("get_tensor_from_selected_rows")
def _get_tensor_from_selected_rows():
    ids = labels("ids", (-1, 2, 1))
    (_, grad), = graphc.append_backward(layers.mean(layers.embedding(ids, [10, 4],
                                                                     is_sparse=True)))
    layers.get_tensor_from_selected_rows(grad)


@case("elementwise_add")
def _add():
    x = graphc.data("x", [-1, 3, 4])
    layers.elementwise_add(x, graphc.data("y", [-1, 3, 4]), act="relu")


@case("elementwise_add", "elementwise_add_axis1")
def _add_axis():
    layers.elementwise_add(image(), graphc.data("bias", [4]), axis=1)


@case("elementwise_sub")
def _sub():
    layers.elementwise_sub(image(), graphc.data("y", [6, 6]))  # trailing dims, axis -1


@case("elementwise_mul")
def _mul():
    # Y [4, 6, 1] at axis 1: Paddle trims Y's trailing 1 that overhangs X
    layers.elementwise_mul(image(), graphc.data("y", [4, 6, 1]), axis=1)


@case("elementwise_mul", "elementwise_mul_axis0_batch")
def _mul_batch():
    layers.elementwise_mul(image(), graphc.data("w", [-1, 4]), axis=0)


@case("elementwise_div")
def _div():
    layers.elementwise_div(image(), graphc.data("y", [1, 6]), axis=2)


@case("relu")
def _relu():
    layers.relu(graphc.data("x", [-1, 3]))


@case("sigmoid")
def _sigmoid():
    layers.sigmoid(graphc.data("x", [-1, 3], "float64"))


@case("tanh")
def _tanh():
    layers.tanh(graphc.data("x", [-1, 3]))


@case("gelu")
def _gelu():
    layers.gelu(graphc.data("x", [-1, 3]), approximate=True)


@case("softsign")
def _softsign():
    layers.softsign(graphc.data("x", [-1, 3]))


@case("leaky_relu")
def _leaky_relu():
    layers.leaky_relu(graphc.data("x", [-1, 3]), alpha=0.1)


@case("scale")
def _scale():
    layers.scale(graphc.data("x", [-1, 3]), 2.0, 0.5, bias_after_scale=False, act="tanh")


@case("softmax")
def _softmax():
    layers.softmax(image(), axis=1)


@case("matmul")
def _matmul():
    layers.matmul(graphc.data("x", [-1, 4]), graphc.data("y", [4, 5]))


@case("matmul", "matmul_transposed_alpha")
def _matmul_t():
    layers.matmul(graphc.data("x", [4, 3]), graphc.data("y", [5, 4]), transpose_x=True,
                  transpose_y=True, alpha=0.5)


@case("matmul", "matmul_batched_vector")
def _matmul_batched():
    x = graphc.data("x", [-1, 2, 3, 4])
    y = layers.matmul(x, graphc.data("y", [-1, 2, 4, 5]))
    layers.matmul(y, graphc.data("v", [5]))


@case("mean")
def _mean():
    layers.mean(image())


@case("reduce_sum")
def _reduce_sum():
    layers.reduce_sum(image())


@case("reduce_mean")
def _reduce_mean():
    layers.reduce_mean(image(), dim=[1, 2], keep_dim=True)


@case("reduce_max")
def _reduce_max():
    layers.reduce_max(image(), dim=-1)


@case("reshape")
def _reshape():
    layers.reshape(image(), [0, -1, 6], act="relu")


@case("transpose")
def _transpose():
    layers.transpose(image(), [0, 2, 3, 1])


@case("concat")
def _concat():
    x = graphc.data("x", [-1, 2, 3])
    layers.concat([x, graphc.data("y", [-1, 4, 3]), x], axis=1)


@case("split")
def _split():
    layers.split(image(), 2, dim=1)


@case("split", "split_sections")
def _split_sections():
    layers.split(image(), [1, -1, 2], dim=-1)


@case("sums")
def _sums():
    x = graphc.data("x", [-1, 3])
    layers.sums([x, layers.relu(x), x])


@case("assign")
def _assign():
    layers.assign(graphc.data("x", [-1, 3]))


@case("cast")
def _cast():
    x = graphc.data("x", [-1, 3])
    layers.cast(layers.cast(x, "float64"), "int32")


@case("fill_constant")
def _fill_constant():
    layers.fill_constant([2, 3], "int64", 7)
    layers.fill_constant([1], "float32", 0.5, force_cpu=True)


@case("softmax_with_cross_entropy")
def _softmax_ce():
    logits = layers.fc(graphc.data("x", [-1, 6]), 5)
    layers.mean(layers.softmax_with_cross_entropy(logits, labels()))


@case("softmax_with_cross_entropy", "softmax_with_cross_entropy_soft_axis1")
def _softmax_ce_soft():
    logits = graphc.data("x", [-1, 5, 3])
    soft = layers.softmax(graphc.data("p", [-1, 5, 3]), axis=1)
    layers.softmax_with_cross_entropy(logits, soft, soft_label=True, return_softmax=True,
                                      axis=1)


@case("cross_entropy")
def _cross_entropy():
    layers.cross_entropy(layers.softmax(graphc.data("x", [-1, 5])), labels(), ignore_index=0)


@case("cross_entropy", "cross_entropy_soft")
def _cross_entropy_soft():
    p = layers.softmax(graphc.data("x", [-1, 5]))
    layers.cross_entropy(p, layers.softmax(graphc.data("q", [-1, 5])), soft_label=True)


@case("accuracy")
def _accuracy():
    layers.accuracy(layers.softmax(graphc.data("x", [-1, 5])), labels(), k=2)


@case("topk")
def _topk():
    layers.topk(graphc.data("x", [-1, 5]), 3)


@case("piecewise_decay")
def _piecewise_decay():
    layers.piecewise_decay([2, 5], [0.1, 0.01, 0.001])


@case("cosine_decay")
def _cosine_decay():
    layers.cosine_decay(0.1, 10, 3)


@case("linear_lr_warmup")
def _linear_lr_warmup():
    # with a schedule as the target rate: both share the one step counter
    base = layers.piecewise_decay([4], [0.1, 0.05])
    layers.linear_lr_warmup(base, 3, 0.0, 0.1)
    layers.linear_lr_warmup(0.2, 3, 0.0, 0.1)


@case("scale", "op_role_and_random_seed")
def _roles():
    main = graphc.default_main_program()
    main.random_seed = 11
    x = graphc.data("x", [-1, 3])
    x.stop_gradient = False  # a non-default flag must print and parse back
    with main.op_role_guard("optimize"):
        layers.scale(x, 0.5)


@case("sequence_pool")
def _sequence_pool():
    ids = graphc.data("ids", [-1, 1], "int64", lod_level=1)
    emb = layers.embedding(ids, [20, 4])
    layers.sequence_pool(emb, "sqrt")
    nested = graphc.data("nested", [-1, 3], lod_level=2)
    layers.sequence_pool(nested, "max", pad_value=-1.0)  # lod2 -> lod1


@case("sequence_first_step")
def _sequence_first_step():
    layers.sequence_first_step(graphc.data("seq", [-1, 3], lod_level=1))


@case("sequence_last_step")
def _sequence_last_step():
    layers.sequence_last_step(graphc.data("seq", [-1, 3], lod_level=1))


def test_every_layer_function_has_a_case():
    missing = sorted(set(layers.__all__) - {layer for layer, _ in CASES.values()})
    assert not missing, f"add round-trip cases for {missing}"


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_layer_round_trips(case_id):
    _, build = CASES[case_id]
    build()
    main, startup = graphc.default_main_program(), graphc.default_startup_program()
    g = graphc.lower(main)
    g.verify()
    # every op remembers the line of this file that built it
    for op in g.ops():
        path, _, line = op.source.rpartition(":")
        assert os.path.basename(path) == THIS_FILE and line.isdigit(), op
    assert_text_round_trips(g)
    assert_program_round_trips(g)
    sg = graphc.lower(startup)
    assert_text_round_trips(sg)
    assert_program_round_trips(sg)
    # the startup program initialises exactly the state the main program reads, and the
    # persistable globals it only writes (piecewise_decay's `learning_rate`, as Paddle's)
    state = {v.name for v in g.inputs if v.var.persistable}
    written = {v.name for v in g.outputs if v.var.persistable} - state
    assert state <= {v.name for v in sg.outputs} <= state | written


# --------------------------------------------------------------------- random programs


@given(random_programs(max_ops=8))
def test_random_programs_round_trip(p):
    g = p.graph()
    assert_text_round_trips(g)
    assert_program_round_trips(g)
    assert_text_round_trips(p.startup_graph())
    assert set(p.feeds) == {v.name for v in g.inputs if v.var.kind == "feed"}
    assert p.fetch and all(name in g.vars for name in p.fetch)


@given(st.data())
def test_random_programs_name_deterministically(data):
    # advance the global name counters: the generator must not see them
    for key in ("fc", "relu", "conv2d", "elementwise_add", "softmax", "x"):
        unique_name.generate(key)
    p = data.draw(random_programs(max_ops=6))
    numbers: dict[str, set[int]] = {}
    for name in p.main.global_block().vars:
        m = re.fullmatch(r"([a-z_0-9]+?)_(\d+)\.(tmp|w|b)_\d+", name)
        if m:
            numbers.setdefault(m.group(1), set()).add(int(m.group(2)))
    for prefix, used in numbers.items():
        assert used == set(range(len(used))), (prefix, sorted(used))
    assert graphc.default_main_program().num_ops == 0  # built under its own program_guard


@given(random_programs(max_ops=3, steps=["conv2d", "pool2d"], with_loss=True))
def test_random_programs_take_only_the_requested_steps(p):
    assert p.steps and set(p.steps) <= {"conv2d", "pool2d"}
    types = {op.type for op in p.main.global_block().ops}
    assert types <= {"conv2d", "depthwise_conv2d", "elementwise_add", "pool2d", "relu", "tanh",
                     "sigmoid", "mean"}
    assert p.loss in p.fetch and p.main.global_block().var(p.loss).shape == (1,)


def test_random_programs_reject_unknown_steps_and_dtypes():
    with pytest.raises(ValueError, match="unknown steps"):
        random_programs(steps=["fc", "lstm"])
    with pytest.raises(ValueError, match="float dtypes"):
        random_programs(cast_dtypes=["int32"])
    with pytest.raises(ValueError, match="min_ops"):
        random_programs(max_ops=2, min_ops=3)


def test_graph_text_is_what_parse_reads_after_a_rewrite():
    x = graphc.data("x", [-1, 3])
    layers.tanh(layers.relu(x))
    g = graphc.lower(graphc.default_main_program())
    relu = g.ops()[0]
    rw = g.rewriter("test")
    new = rw.create_op("sigmoid", {"X": relu.input("X")}, {"Out": "sig"}, derived_from=[relu])
    rw.replace_all_uses(relu.output("Out"), new.output("Out"))
    rw.erase_op(relu)
    assert_text_round_trips(g)
    assert_program_round_trips(g)


# ------------------------------------------------------------------------- parse errors

VALID = """\
// a comment and a blank line: line numbers still count them

graph @main {
  input %x: f32[-1,3] {feed}
  %relu_0.tmp_0: f32[-1,3] = relu(X=%x)
  %leaky_relu_0.tmp_0: f32[-1,3] = leaky_relu(X=%relu_0.tmp_0) {alpha=0.1}
  output %leaky_relu_0.tmp_0
}
"""


def test_valid_text_parses():
    g = graphc.parse(VALID)
    g.verify()
    assert [op.type for op in g.ops()] == ["relu", "leaky_relu"]
    assert g.ops()[1].attrs["alpha"] == 0.1


@pytest.mark.parametrize("old, new, line, message", [
    ("= relu(X=%x)", "= frobnicate(X=%x)", 5, "unknown op type 'frobnicate'"),
    ("leaky_relu(X=%relu_0.tmp_0)", "leaky_relu(X=%relu_9)", 6,
     "'%relu_9' is used before it is defined"),
    ("output %leaky_relu_0.tmp_0", "output %nowhere", 7, "'%nowhere' is used before"),
    ("%x: f32[-1,3]", "%x: f33[-1,3]", 4, "bad type 'f33[-1,3]'"),
    ("%x: f32[-1,3]", "%x: f32[-1,x]", 4, "expected a type"),
    ("\n}\n", "\n", 7, "missing closing '}'"),
    ("graph @main {", "graph @main", 3, "expected '{'"),
    ("{alpha=0.1}", '{alpha="big"}', 6, "attribute 'alpha' expects float"),
    ("{alpha=0.1}", "{alpha=[1]}", 6, "attribute 'alpha' expects float"),
    ("{alpha=0.1}", "{beta=0.1}", 6, "unknown attribute 'beta'"),
    ("{alpha=0.1}", "{alpha=0.1", 6, "expected '}'"),
    ("%leaky_relu_0.tmp_0: f32[-1,3] =", "%relu_0.tmp_0: f32[-1,3] =", 6, "defined twice"),
    ("{feed}", "{feed, param}", 4, "several kinds"),
    ("\n}\n", "\n}\n  output %x\n", 9, "text after the closing '}'"),
])
def test_parse_errors_give_the_line(old, new, line, message):
    assert old in VALID
    text = VALID.replace(old, new, 1)
    with pytest.raises(graphc.ParseError) as err:
        graphc.parse(text)
    assert err.value.line == line
    assert f"line {line}," in str(err.value)
    assert message in str(err.value)


@pytest.mark.parametrize("old, new, message", [
    ("relu(X=%x)", "relu(Y=%x)", "no input slot 'Y'"),
    ("%relu_0.tmp_0: f32[-1,3] =", "%relu_0.tmp_0: f32[-1,4] =", "shape mismatch"),
    ("relu(X=%x)", "relu()", "missing required input slot 'X'"),
])
def test_well_formed_but_invalid_text_never_yields_a_valid_graph(old, new, message):
    # The parser checks syntax, names and attributes; slots and types are the verifier's.
    text = VALID.replace(old, new, 1)
    with pytest.raises((graphc.ParseError, graphc.VerifyError)) as err:
        graphc.parse(text).verify()
    assert message in str(err.value)
    assert "op relu" in str(err.value) or err.value.line == 5


def test_parse_error_points_at_the_column():
    with pytest.raises(graphc.ParseError) as err:
        graphc.parse(VALID.replace("= relu(", "= frobnicate("))
    text_line = VALID.replace("= relu(", "= frobnicate(").splitlines()[4]
    assert text_line[err.value.col:].startswith("frobnicate")


def test_empty_text_is_a_parse_error():
    with pytest.raises(graphc.ParseError) as err:
        graphc.parse("// nothing here\n")
    assert err.value.line == 1


# -- tensor manipulation (issue 15) ------------------------------------------------------------
def _x(shape=(-1, 3, 4), name="x", dtype="float32"):
    return graphc.data(name, list(shape), dtype)


def _bools(x="x", y="y"):
    return layers.greater_than(_x(name=x), _x(name=y))


MANIPULATION_CASES = {
    "slice": lambda: layers.slice(_x(), [1, -1], [0, -3], [2, 10000]),
    "strided_slice": lambda: layers.strided_slice(_x(), [2], [-1], [-5], [-2]),
    "squeeze": lambda: layers.squeeze(_x((-1, 1, 4)), [1]),
    "unsqueeze": lambda: layers.unsqueeze(_x(), [0, -1]),
    "flatten": lambda: layers.flatten(_x(), 2),
    "shape": lambda: layers.shape(_x()),
    "expand": lambda: layers.expand(_x(), [1, 2, 1]),
    "expand_as": lambda: layers.expand_as(_x((-1, 1, 4)), _x(name="t")),
    "gather": lambda: layers.gather(_x((10, 3)), labels("i", (-1,)), overwrite=False),
    "gather_nd": lambda: layers.gather_nd(_x(), labels("i", (-1, 2))),
    "scatter": lambda: layers.scatter(_x((10, 3)), labels("i", (2,)), _x((2, 3), "u")),
    "stack": lambda: layers.stack([_x(), _x(name="y")], axis=-1),
    "unstack": lambda: layers.unstack(_x(), axis=1),
    "one_hot": lambda: layers.one_hot(labels(), 5),
    "where": lambda: (layers.where(_bools()), layers.where(_bools("a", "b"), size=4)),
    "range": lambda: layers.range(0, 7, 2, "int32"),
    "arange": lambda: layers.arange(4),
    "zeros": lambda: layers.zeros([2, 3], "int64"),
    "ones": lambda: layers.ones([2], "float32"),
    "zeros_like": lambda: layers.zeros_like(_x()),
    "ones_like": lambda: layers.ones_like(_x()),
    "fill_constant_batch_size_like":
        lambda: layers.fill_constant_batch_size_like(_x(), [1, 6], "float32", 0.5),
    "uniform_random_batch_size_like":
        lambda: layers.uniform_random_batch_size_like(_x(), [1, 6], seed=3),
    "increment": lambda: layers.increment(layers.fill_constant([1], "int64", 0)),
    "argmax": lambda: layers.argmax(_x(), axis=-1),
    "argmin": lambda: layers.argmin(_x(), axis=1),
    "argsort": lambda: layers.argsort(_x(), descending=True),
    "reduce_min": lambda: layers.reduce_min(_x(), dim=[-1], keep_dim=True),
    "reduce_prod": lambda: layers.reduce_prod(_x()),
    "reduce_all": lambda: layers.reduce_all(_bools(), dim=1),
    "reduce_any": lambda: layers.reduce_any(_bools()),
    "clip": lambda: layers.clip(_x(), -1.0, 1.0),
    "clip_by_norm": lambda: layers.clip_by_norm(_x(), 2.0),
    "l2_normalize": lambda: layers.l2_normalize(_x(), axis=-1),
    "abs": lambda: layers.abs(_x()),
    "sqrt": lambda: layers.sqrt(_x()),
    "exp": lambda: layers.exp(_x()),
    "log": lambda: layers.log(_x()),
    "square": lambda: layers.square(_x()),
    "sign": lambda: layers.sign(_x()),
    "pow": lambda: layers.pow(_x(), 3.0),
    "elementwise_max": lambda: layers.elementwise_max(_x(), _x((4,), "y")),
    "elementwise_min": lambda: layers.elementwise_min(_x(), _x((3,), "y"), axis=1),
    "elementwise_pow": lambda: layers.elementwise_pow(_x(), _x(name="y")),
    "elementwise_mod": lambda: layers.elementwise_mod(labels(), labels("m")),
    "elementwise_floordiv": lambda: layers.elementwise_floordiv(labels(), labels("m")),
    "equal": lambda: layers.equal(_x(), _x(name="y")),
    "not_equal": lambda: layers.not_equal(_x(), _x(name="y")),
    "less_than": lambda: layers.less_than(_x(), _x(name="y")),
    "less_equal": lambda: layers.less_equal(_x(), _x(name="y")),
    "greater_than": _bools,
    "greater_equal": lambda: layers.greater_equal(_x(), _x(name="y")),
    "logical_and": lambda: layers.logical_and(_bools(), layers.less_than(_x(name="a"),
                                                                          _x(name="b"))),
    "logical_or": lambda: layers.logical_or(_bools(), layers.less_than(_x(name="a"),
                                                                        _x(name="b"))),
    "logical_xor": lambda: layers.logical_xor(_bools(), layers.less_than(_x(name="a"),
                                                                          _x(name="b"))),
    "logical_not": lambda: layers.logical_not(_bools()),
}
for _layer, _build in MANIPULATION_CASES.items():
    case(_layer)(_build)  # test_every_layer_function_has_a_case reads CASES when it runs


@pytest.mark.parametrize("case_id", sorted(MANIPULATION_CASES))
def test_manipulation_layers_round_trip(case_id):
    test_layer_round_trips(case_id)


# -- issue 24: math activations ---------------------------------------------------------------
MATH_ACTIVATION_CASES = {
    **{name: (lambda name=name: getattr(layers, name)(_x()))
       for name in ("logsigmoid", "softplus", "tanh_shrink", "erf", "atan", "rsqrt", "ceil",
                    "floor", "cos", "acos", "asin", "sin", "round", "reciprocal")},
    "selu": lambda: layers.selu(_x(), scale=1.5),
    "elu": lambda: layers.elu(_x(), alpha=0.5),
    "relu6": lambda: layers.relu6(_x(), threshold=4.0),
    "stanh": lambda: layers.stanh(_x(), 0.5, 2.0),
    "hard_sigmoid": lambda: layers.hard_sigmoid(_x(), slope=0.1),
    "swish": lambda: layers.swish(_x(), beta=2.0),
    "brelu": lambda: layers.brelu(_x(), 1.0, 5.0),
    "soft_relu": lambda: layers.soft_relu(_x(), threshold=20.0),
    "hard_swish": lambda: layers.hard_swish(_x(), offset=2.0),
    "thresholded_relu": lambda: layers.thresholded_relu(_x(), 0.5),
    "softshrink": lambda: layers.softshrink(_x(), alpha=0.3),
    "hard_shrink": lambda: layers.hard_shrink(_x(), threshold=0.3),
    "prelu": lambda: layers.prelu(image(), "channel"),
    "maxout": lambda: layers.maxout(image(), groups=2),
    "cumsum": lambda: layers.cumsum(_x(), axis=1, exclusive=True, reverse=True),
    "sum": lambda: layers.sum([_x(), _x(name="y")]),
    "mul": lambda: layers.mul(_x(), _x((4, 5), "y"), x_num_col_dims=2),
    "rank": lambda: layers.rank(_x()),
    "size": lambda: layers.size(_x()),
    "has_inf": lambda: layers.has_inf(_x()),
    "has_nan": lambda: layers.has_nan(_x()),
    "isfinite": lambda: layers.isfinite(_x()),
}
for _layer, _build in MATH_ACTIVATION_CASES.items():
    case(_layer)(_build)  # test_every_layer_function_has_a_case reads CASES when it runs


@pytest.mark.parametrize("case_id", sorted(MATH_ACTIVATION_CASES))
def test_math_activation_layers_round_trip(case_id):
    test_layer_round_trips(case_id)
# -- end issue 24: math activations

# -- issue 24: detection ----------------------------------------------------------------------
@case("prior_box")
def _prior_box():
    layers.prior_box(image(), image((-1, 3, 24, 24), "im"), [2.0], [4.0], [2.0], flip=True,
                     clip=True, steps=[4.0, 4.0])


@case("box_coder")
def _box_coder():
    prior = graphc.data("prior", [5, 4])
    layers.box_coder(prior, [0.1, 0.1, 0.2, 0.2], graphc.data("t", [-1, 5, 4]),
                     "decode_center_size")


@case("iou_similarity")
def _iou_similarity():
    layers.iou_similarity(graphc.data("x", [-1, 4]), graphc.data("y", [5, 4]), False)


@case("yolo_box")
def _yolo_box():
    layers.yolo_box(image((-1, 14, 3, 3)), graphc.data("size", [-1, 2], "int32"),
                    [10, 13, 16, 30], 2, 0.01, 32)


@case("anchor_generator")
def _anchor_generator():
    layers.anchor_generator(image(), [32.0, 64.0], [0.5, 1.0], stride=[16.0, 16.0])


@case("polygon_box_transform")
def _polygon_box_transform():
    layers.polygon_box_transform(image())


@case("roi_align")
def _roi_align():
    layers.roi_align(image(), graphc.data("rois", [-1, 4], lod_level=1), 2, 2, 0.25, 2)


@case("roi_pool")
def _roi_pool():
    layers.roi_pool(image(), graphc.data("rois", [-1, 4]), 2, 2, 0.25,
                    rois_lod=graphc.data("offsets", [3], "int64"))


@case("box_clip")
def _box_clip():
    layers.box_clip(graphc.data("b", [-1, 4], lod_level=1), graphc.data("im", [-1, 3]))


@case("box_decoder_and_assign")
def _box_decoder_and_assign():
    layers.box_decoder_and_assign(graphc.data("p", [-1, 4]), graphc.data("v", [4]),
                                  graphc.data("t", [-1, 8]), graphc.data("s", [-1, 2]), 4.1)


@case("density_prior_box")
def _density_prior_box():
    layers.density_prior_box(image(), image((-1, 3, 24, 24), "im"), [2, 1], [4.0, 8.0], [1.0],
                             flatten_to_2d=True)


@case("bipartite_match")
def _bipartite_match():
    layers.bipartite_match(graphc.data("d", [-1, 6], lod_level=1), "per_prediction", 0.3)


@case("target_assign")
def _target_assign():
    layers.target_assign(graphc.data("x", [-1, 1, 4], lod_level=1),
                         graphc.data("m", [-1, 6], "int32"),
                         graphc.data("neg", [-1, 1], "int32", lod_level=1), 0)


@case("detection_output")
def _detection_output():
    layers.detection_output(graphc.data("loc", [-1, 5, 4]), graphc.data("conf", [-1, 5, 3]),
                            graphc.data("p", [5, 4]), graphc.data("pv", [5, 4]))


@case("multiclass_nms")
def _multiclass_nms():
    layers.multiclass_nms(graphc.data("b", [-1, 9, 4]), graphc.data("s", [-1, 3, 9]), 0.1, 5,
                          4, nms_eta=0.9)


@pytest.mark.parametrize("case_id", ["prior_box", "box_coder", "iou_similarity", "yolo_box",
                                     "anchor_generator", "polygon_box_transform",
                                     "roi_align", "roi_pool", "multiclass_nms", "box_clip",
                                     "box_decoder_and_assign", "density_prior_box",
                                     "bipartite_match", "target_assign", "detection_output"])
def test_detection_layers_round_trip(case_id):
    test_layer_round_trips(case_id)
# -- end issue 24: detection


# -- issue 24: vision sampling ----------------------------------------------------------------
@case("psroi_pool")
def _psroi_pool():
    layers.psroi_pool(image((-1, 8, 6, 6)), graphc.data("rois", [-1, 4], lod_level=1), 2, 0.5,
                      2, 2)


@case("prroi_pool")
def _prroi_pool():
    layers.prroi_pool(image(), graphc.data("rois", [-1, 4]), 0.25, 2, 2,
                      batch_roi_nums=graphc.data("nums", [-1], "int64"))


@case("deformable_conv")
def _deformable_conv():
    layers.deformable_conv(image(), image((-1, 18, 6, 6), "off"), image((-1, 9, 6, 6), "m"), 3,
                           3, padding=1)


@case("deformable_conv", "deformable_conv_v1")
def _deformable_conv_v1():
    layers.deformable_conv(image(), image((-1, 36, 3, 3), "off"), None, 4, 3, stride=2,
                           padding=1, groups=2, deformable_groups=2, modulated=False)


@case("deformable_roi_pooling")
def _deformable_roi_pooling():
    layers.deformable_roi_pooling(image(), graphc.data("rois", [-1, 4], lod_level=1),
                                  image((-1, 2, 2, 2), "trans"), group_size=[2, 2],
                                  pooled_height=2, pooled_width=2, position_sensitive=True)


@case("roi_perspective_transform")
def _roi_perspective_transform():
    layers.roi_perspective_transform(image(), graphc.data("rois", [-1, 8], lod_level=1), 2, 3)


@case("im2sequence")
def _im2sequence():
    layers.im2sequence(image(), [2, 2], 1, [0, 1], graphc.data("sizes", [-1, 2], "int32"), 2)


@pytest.mark.parametrize("case_id", ["psroi_pool", "prroi_pool", "deformable_conv",
                                     "deformable_conv_v1", "deformable_roi_pooling",
                                     "roi_perspective_transform", "im2sequence"])
def test_vision_sampling_layers_round_trip(case_id):
    test_layer_round_trips(case_id)
# -- end issue 24: vision sampling


# -- issue 24: detection proposals
@case("multiclass_nms2")
def _multiclass_nms2():
    layers.multiclass_nms2(graphc.data("b", [-1, 9, 4]), graphc.data("s", [-1, 3, 9]), 0.1, 5,
                           4, return_index=True)


@case("locality_aware_nms")
def _locality_aware_nms():
    layers.locality_aware_nms(graphc.data("b", [-1, 9, 4]), graphc.data("s", [-1, 3, 9]), 0.1,
                              5, 4)


@case("retinanet_detection_output")
def _retinanet_detection_output():
    layers.retinanet_detection_output(
        [graphc.data("b0", [-1, 12, 4]), graphc.data("b1", [-1, 3, 4])],
        [graphc.data("s0", [-1, 12, 5]), graphc.data("s1", [-1, 3, 5])],
        [graphc.data("a0", [12, 4]), graphc.data("a1", [3, 4])], graphc.data("im", [-1, 3]))


@case("generate_proposals")
def _generate_proposals():
    layers.generate_proposals(graphc.data("s", [-1, 3, 4, 5]), graphc.data("d", [-1, 12, 4, 5]),
                              graphc.data("im", [-1, 3]), graphc.data("a", [4, 5, 3, 4]),
                              graphc.data("v", [4, 5, 3, 4]), 50, 10)


@case("distribute_fpn_proposals")
def _distribute_fpn_proposals():
    layers.distribute_fpn_proposals(graphc.data("r", [-1, 4], lod_level=1), 2, 5, 4, 224)


@case("collect_fpn_proposals")
def _collect_fpn_proposals():
    layers.collect_fpn_proposals([graphc.data(f"r{i}", [-1, 4], lod_level=1) for i in range(2)],
                                 [graphc.data(f"s{i}", [-1, 1], lod_level=1) for i in range(2)],
                                 2, 3, 20)


@case("generate_proposal_labels")
def _generate_proposal_labels():
    layers.generate_proposal_labels(
        graphc.data("r", [-1, 4], lod_level=1), graphc.data("c", [-1, 1], "int32", lod_level=1),
        graphc.data("w", [-1, 1], "int32", lod_level=1), graphc.data("g", [-1, 4], lod_level=1),
        graphc.data("im", [-1, 3]), class_nums=5)


@pytest.mark.parametrize("case_id", ["multiclass_nms2", "locality_aware_nms",
                                     "retinanet_detection_output", "generate_proposals",
                                     "distribute_fpn_proposals", "collect_fpn_proposals",
                                     "generate_proposal_labels"])
def test_detection_proposals_layers_round_trip(case_id):
    test_layer_round_trips(case_id)
# -- end issue 24: detection proposals


# -- issue 24: detection targets ------------------------------------------------------------
@case("yolov3_loss")
def _yolov3_loss():
    layers.yolov3_loss(image((-1, 14, 4, 4)), graphc.data("b", [-1, 3, 4]),
                       graphc.data("l", [-1, 3], "int32"), [10, 13, 16, 30, 33, 23], [1, 2], 2,
                       0.7, 8, gt_score=graphc.data("s", [-1, 3]), scale_x_y=1.05)


@case("multi_box_head")
def _multi_box_head():
    layers.multi_box_head([image((-1, 4, 4, 4)), image((-1, 4, 2, 2), "f2")],
                          image((-1, 3, 32, 32), "im"), 32, 3, [[2.0], [2.0]],
                          min_sizes=[8.0, 16.0], max_sizes=[16.0, 28.0])


@case("ssd_loss")
def _ssd_loss():
    layers.ssd_loss(graphc.data("loc", [-1, 6, 4]), graphc.data("conf", [-1, 6, 3]),
                    graphc.data("gt", [-1, 4], lod_level=1),
                    graphc.data("gl", [-1, 1], "int32", lod_level=1), graphc.data("p", [6, 4]),
                    graphc.data("pv", [6, 4]))


@case("rpn_target_assign")
def _rpn_target_assign():
    layers.rpn_target_assign(graphc.data("bp", [-1, 32]), graphc.data("cl", [-1, 8]),
                             graphc.data("a", [8, 4]), graphc.data("v", [8, 4]),
                             graphc.data("gt", [-1, 4], lod_level=1),
                             graphc.data("crowd", [-1, 1], "int32", lod_level=1),
                             graphc.data("info", [-1, 3]), 6, use_random=False)


@case("retinanet_target_assign")
def _retinanet_target_assign():
    layers.retinanet_target_assign(graphc.data("bp", [-1, 8, 4]), graphc.data("cl", [-1, 8, 3]),
                                   graphc.data("a", [8, 4]), graphc.data("v", [8, 4]),
                                   graphc.data("gt", [-1, 4], lod_level=1),
                                   graphc.data("gl", [-1, 1], "int32", lod_level=1),
                                   graphc.data("crowd", [-1, 1], "int32", lod_level=1),
                                   graphc.data("info", [-1, 3]), 3)


@pytest.mark.parametrize("case_id", ["yolov3_loss", "multi_box_head", "ssd_loss",
                                     "rpn_target_assign", "retinanet_target_assign"])
def test_detection_target_layers_round_trip(case_id):
    test_layer_round_trips(case_id)
# -- end issue 24: detection targets


# -- issue 24: detection eval ---------------------------------------------------------------
@case("detection_map", "DetectionMAP")
def _detection_map_metric():
    det = graphc.data("det", [-1, 6], lod_level=1)
    box = graphc.data("gt_box", [-1, 4], lod_level=1)
    label = graphc.data("gt_label", [-1, 1], "int32", lod_level=1)
    hard = graphc.data("difficult", [-1, 1], "int32", lod_level=1)
    graphc.fluid.metrics.DetectionMAP(det, label, box, hard, class_num=3,
                                      ap_version="11point")


def test_detection_eval_round_trips():
    test_layer_round_trips("DetectionMAP")
# -- end issue 24: detection eval


# -- issue 24: beam and mask ------------------------------------------------------------------
@case("gather_tree")
def _gather_tree():
    layers.gather_tree(graphc.data("ids", [4, -1, 3], "int64"),
                       graphc.data("parents", [4, -1, 3], "int64"))


@case("generate_mask_labels")
def _generate_mask_labels():
    ints = [graphc.data(n, [-1, 1], "int32", lod_level=1) for n in ("cls", "crowd", "lab")]
    layers.generate_mask_labels(graphc.data("info", [-1, 3]), ints[0], ints[1],
                                graphc.data("segms", [-1, 2], lod_level=3),
                                graphc.data("rois", [-1, 4], lod_level=1), ints[2], 81, 14)


@pytest.mark.parametrize("case_id", ["gather_tree", "generate_mask_labels"])
def test_beam_mask_layers_round_trip(case_id):
    test_layer_round_trips(case_id)
# -- end issue 24: beam and mask


# -- issue 24: distributions and Variable ---------------------------------------------------
@case("Uniform")
def _uniform():
    u = layers.Uniform(graphc.data("low", [-1, 3]), graphc.data("high", [-1, 3]))
    u.entropy()
    u.log_prob(graphc.data("v", [-1, 3]))
    layers.Uniform([0.0, 1.0], [2.0, 3.0]).sample([4], seed=2)


@case("Normal")
def _normal():
    n = layers.Normal([0.0, 1.0], [1.0, 2.0])
    n.sample([3], seed=1)
    n.kl_divergence(layers.Normal([1.0, 1.0], [0.5, 0.5]))
    n.log_prob(graphc.data("v", [2]))
    n.entropy()


@case("Categorical")
def _categorical():
    c = layers.Categorical(graphc.data("logits", [-1, 5]))
    c.entropy()
    c.kl_divergence(layers.Categorical(graphc.data("other", [-1, 5])))


@case("MultivariateNormalDiag")
def _mvn():
    m = layers.MultivariateNormalDiag([0.5, 1.0], [[1.0, 0.0], [0.0, 2.0]])
    m.entropy()
    m.kl_divergence(layers.MultivariateNormalDiag([0.0, 0.0], [[1.0, 0.0], [0.0, 1.0]]))
    x = graphc.data("x", [-1, 4, 5])
    x[:, 1:3], x[0], x[:, ::-2, -1], layers.shape(x)[0], x.astype("int64")
# -- end issue 24: distributions and Variable


# -- issue 24: tensor creation and manipulation ------------------------------------------------
def _img(shape=(-1, 8, 4, 4), name="img"):
    return graphc.data(name, list(shape), "float32")


TENSOR_CREATION_CASES = {
    "create_tensor": lambda: layers.assign(_x(), layers.create_tensor("float32", "held")),
    "create_parameter": lambda: layers.create_parameter([3, 4], "float32", "w_free"),
    "create_global_var": lambda: layers.create_global_var([1], 2.5, "float32", True,
                                                          name="lr"),
    "uniform_random": lambda: layers.uniform_random([2, 3], min=-0.5, max=0.5, seed=7),
    "gaussian_random": lambda: layers.gaussian_random([4], 1.0, 2.0),
    "gaussian_random_batch_size_like":
        lambda: layers.gaussian_random_batch_size_like(_x(), [1, 6], std=0.5),
    "sampling_id": lambda: layers.sampling_id(layers.softmax(_x((-1, 5)))),
    "linspace": lambda: layers.linspace(0, 1, 5, "float64"),
    "diag": lambda: layers.diag(_x((3,))),
    "eye": lambda: layers.eye(2, 3, [4]),
    "reverse": lambda: layers.reverse(_x(), [0, -1]),
    "unique": lambda: layers.unique(labels("i", (6,))),
    "unique_with_counts": lambda: layers.unique_with_counts(labels("i", (6,)), "int64"),
    "pad": lambda: layers.pad(_x(), [0, 0, 1, 2, 0, 1], 0.5),
    "pad2d": lambda: layers.pad2d(_img(), [1, 1, 0, 2], "edge"),
    "pad_constant_like": lambda: layers.pad_constant_like(_x((5, 6)), _x((3, 6), "y"), 1.0),
    "crop": lambda: layers.crop(_x((5, 6)), _x((2, 3), "like"), [1, 1]),
    "crop_tensor": lambda: layers.crop_tensor(_x(), [-1, 2, 2], [0, 1, 0]),
    "label_smooth": lambda: layers.label_smooth(_x((-1, 4)), epsilon=0.2),
    "multiplex": lambda: layers.multiplex([_x(), _x(name="y")], labels()),
    "scatter_nd_add":
        lambda: layers.scatter_nd_add(_x((3, 4)), labels("i", (-1, 1)), _x((-1, 4), "u")),
    "scatter_nd": lambda: layers.scatter_nd(labels("i", (-1, 2)), _x((-1,), "u"), [3, 4]),
    "shard_index": lambda: layers.shard_index(labels(), 20, 2, 0),
    "space_to_depth": lambda: layers.space_to_depth(_img(), 2),
    "pixel_shuffle": lambda: layers.pixel_shuffle(_img(), 2),
    "shuffle_channel": lambda: layers.shuffle_channel(_img(), 4),
    "is_empty": lambda: layers.is_empty(_x()),
}
for _layer, _build in TENSOR_CREATION_CASES.items():
    case(_layer)(_build)  # test_every_layer_function_has_a_case reads CASES when it runs


@pytest.mark.parametrize("case_id", sorted(TENSOR_CREATION_CASES))
def test_tensor_creation_layers_round_trip(case_id):
    test_layer_round_trips(case_id)


# -- losses, metrics and learning-rate schedules (issue 15) ---------------------------------------
def _prob(name="p", width=1):
    return layers.sigmoid(_x((-1, width), name))


LOSS_CASES = {
    "square_error_cost": lambda: layers.square_error_cost(_x((-1, 1)), _x((-1, 1), "y")),
    "mse_loss": lambda: layers.mse_loss(_x((-1, 1)), _x((-1, 1), "y")),
    "sigmoid_cross_entropy_with_logits": lambda: layers.sigmoid_cross_entropy_with_logits(
        _x((-1, 3)), _x((-1, 3), "y"), normalize=True),
    "cos_sim": lambda: layers.cos_sim(_x((-1, 4)), _x((-1, 4), "y")),
    "log_loss": lambda: layers.log_loss(_prob(), _x((-1, 1), "y")),
    "huber_loss": lambda: layers.huber_loss(_x((-1, 1)), _x((-1, 1), "y"), 1.0),
    "smooth_l1": lambda: layers.smooth_l1(_x((-1, 4)), _x((-1, 4), "y")),
    "bpr_loss": lambda: layers.bpr_loss(layers.softmax(_x((-1, 5))), labels()),
    "margin_rank_loss": lambda: layers.margin_rank_loss(_x((-1, 1), "l"), _x((-1, 1)),
                                                        _x((-1, 1), "y")),
    "rank_loss": lambda: layers.rank_loss(_x((-1, 1), "l"), _x((-1, 1)), _x((-1, 1), "y")),
    "kldiv_loss": lambda: layers.kldiv_loss(_x((-1, 4)), _x((-1, 4), "y"), reduction="batchmean"),
    "auc": lambda: layers.auc(layers.softmax(_x((-1, 2))), labels(), num_thresholds=15),
    "exponential_decay": lambda: layers.exponential_decay(0.1, 100, 0.5, staircase=True),
    "natural_exp_decay": lambda: layers.natural_exp_decay(0.1, 100, 0.5),
    "inverse_time_decay": lambda: layers.inverse_time_decay(0.1, 100, 0.5),
    "polynomial_decay": lambda: layers.polynomial_decay(0.1, 100, cycle=True),
    "noam_decay": lambda: layers.noam_decay(512, 4000),
}
for _layer, _build in LOSS_CASES.items():
    case(_layer)(_build)  # test_every_layer_function_has_a_case reads CASES when it runs


@pytest.mark.parametrize("case_id", sorted(LOSS_CASES))
def test_loss_layers_round_trip(case_id):
    test_layer_round_trips(case_id)


# -- LoD sequence layers (issue 16) --------------------------------------------------------------
def _seq_in(name="seq", width=3, level=1, dtype="float32"):
    return graphc.data(name, [-1, width], dtype, lod_level=level)


def _sequence_conv_pool():
    from graphc.fluid import nets
    nets.sequence_conv_pool(_seq_in(), 4, 3, act="tanh", pool_type="sum")


SEQUENCE_LAYER_CASES = {
    "sequence_softmax": lambda: layers.sequence_softmax(_seq_in(width=1, level=2)),
    "sequence_conv": lambda: layers.sequence_conv(_seq_in(), 4, 3, padding_start=-2, act="relu"),
    "sequence_expand": lambda: layers.sequence_expand(graphc.data("rows", [-1, 3]),
                                                      _seq_in(level=2), ref_level=0),
    "sequence_expand_as": lambda: layers.sequence_expand_as(graphc.data("rows", [-1, 3]),
                                                            _seq_in()),
    "sequence_concat": lambda: layers.sequence_concat([_seq_in("a"), _seq_in("b")]),
    "sequence_reshape": lambda: layers.sequence_reshape(_seq_in(width=4), 2),
    "sequence_pad": lambda: layers.sequence_pad(_seq_in(), layers.fill_constant([1], "float32",
                                                                             0.0), maxlen=8),
    "sequence_unpad": lambda: layers.sequence_unpad(graphc.data("padded", [-1, 5, 3]),
                                                    graphc.data("len", [-1], "int64")),
    "sequence_mask": lambda: layers.sequence_mask(graphc.data("len", [-1], "int64"), maxlen=6,
                                                  dtype="float32"),
    "sequence_reverse": lambda: layers.sequence_reverse(_seq_in(level=2)),
    "sequence_slice": lambda: layers.sequence_slice(_seq_in(), graphc.data("o", [-1, 1], "int64"),
                                                    graphc.data("n", [-1, 1], "int64")),
    "sequence_enumerate": lambda: layers.sequence_enumerate(_seq_in(width=1, dtype="int64"), 3,
                                                            pad_value=-1),
    "sequence_scatter": lambda: layers.sequence_scatter(graphc.data("rows", [-1, 6]),
                                                        _seq_in("ids", 1, dtype="int64"),
                                                        _seq_in("upd", 1)),
}
for _layer, _build in SEQUENCE_LAYER_CASES.items():
    case(_layer)(_build)  # test_every_layer_function_has_a_case reads CASES when it runs
case("sequence_pool", "nets.sequence_conv_pool")(_sequence_conv_pool)


@pytest.mark.parametrize("case_id", [*sorted(SEQUENCE_LAYER_CASES), "nets.sequence_conv_pool"])
def test_sequence_layers_round_trip(case_id):
    test_layer_round_trips(case_id)


# -- recurrent and sequence-labelling layers over LoD sequences (issue 16) -----------------------
def _seq(width, name="seq", dtype="float32"):
    return graphc.data(name, [-1, width], dtype, lod_level=1)


def _tags(name="tags"):
    return graphc.data(name, [-1, 1], "int64", lod_level=1)


RNN_CASES = {
    "dynamic_lstm": lambda: layers.dynamic_lstm(_seq(8), 8, h_0=_x((-1, 2), "h0"),
                                                c_0=_x((-1, 2), "c0"), is_reverse=True),
    "dynamic_lstmp": lambda: layers.dynamic_lstmp(_seq(8), 8, 3, use_peepholes=False,
                                                  cell_clip=2.0),
    "dynamic_gru": lambda: layers.dynamic_gru(_seq(6), 2, origin_mode=True),
    "gru_unit": lambda: layers.gru_unit(_x((-1, 6)), _x((-1, 2), "h"), 6,
                                        activation="relu"),
    "lstm_unit": lambda: layers.lstm_unit(_x((-1, 3)), _x((-1, 2), "h"), _x((-1, 2), "c"),
                                          forget_bias=1.0),
    "linear_chain_crf": lambda: layers.linear_chain_crf(_seq(3), _tags(),
                                                        graphc.ParamAttr(name="crfw")),
    "crf_decoding": lambda: layers.crf_decoding(
        _seq(3), "crfw", label=_tags()) if layers.linear_chain_crf(
            _seq(3, "em"), _tags("gold"), graphc.ParamAttr(name="crfw")) else None,
    "chunk_eval": lambda: layers.chunk_eval(_tags("inf"), _tags(), "IOBES", 3,
                                            excluded_chunk_types=[1]),
}
for _layer, _build in RNN_CASES.items():
    case(_layer)(_build)  # test_every_layer_function_has_a_case reads CASES when it runs


@pytest.mark.parametrize("case_id", sorted(RNN_CASES))
def test_rnn_layers_round_trip(case_id):
    test_layer_round_trips(case_id)


def _dynamic_rnn():
    drnn = layers.DynamicRNN()
    with drnn.block():
        word = drnn.step_input(_seq(3, "words"))
        prev = drnn.memory(shape=[2], value=0.5)
        h = layers.fc([word, prev], 2, act="tanh")
        drnn.update_memory(prev, h)
        drnn.output(h, layers.sequence_pool(drnn.static_input(_seq(2, "enc")), "max"))
    return drnn()


case("DynamicRNN")(_dynamic_rnn)  # test_every_layer_function_has_a_case reads CASES


def test_dynamic_rnn_round_trips():
    test_layer_round_trips("DynamicRNN")


# -- issue 24: losses ---------------------------------------------------------------------------
def _ids(name, shape=(-1, 6), dtype="int64", lod_level=0):
    return graphc.data(name, list(shape), dtype, lod_level=lod_level)


LOSS_MORE_CASES = {
    "sigmoid_focal_loss": lambda: layers.sigmoid_focal_loss(
        _x((-1, 5)), _ids("label", (-1, 1), "int32"), _ids("fg", (1,), "int32"), gamma=1.5),
    "teacher_student_sigmoid_loss": lambda: layers.teacher_student_sigmoid_loss(
        _x((-1, 1)), _x((-1, 1), "label"), soft_max_up_bound=10.0),
    "center_loss": lambda: layers.center_loss(_x((-1, 4)), _ids("label", (-1, 1)), 5, 0.1,
                                              None),
    "npair_loss": lambda: layers.npair_loss(_x((-1, 4)), _x((-1, 4), "p"), _ids("l", (-1,))),
    "mean_iou": lambda: layers.mean_iou(_ids("p", (-1, 4, 4), "int32"),
                                        _ids("l", (-1, 4, 4), "int32"), 3),
    "edit_distance": lambda: layers.edit_distance(
        _ids("h"), _ids("r", (-1, 4)), ignored_tokens=[0], input_length=_ids("hl", (-1,)),
        label_length=_ids("rl", (-1,))),
    "edit_distance-lod": lambda: layers.edit_distance(
        _ids("h", (-1, 1), lod_level=1), _ids("r", (-1, 1), lod_level=1), normalized=False),
    "warpctc": lambda: layers.warpctc(_x((7, -1, 5)), _ids("l", (-1, 3), "int32"), blank=4,
                                      input_length=_ids("xl", (-1,)),
                                      label_length=_ids("ll", (-1,))),
    "warpctc-lod": lambda: layers.warpctc(_ids("x", (-1, 5), "float32", 1),
                                          _ids("l", (-1, 1), "int32", 1),
                                          norm_by_times=True),
    "ctc_greedy_decoder": lambda: layers.ctc_greedy_decoder(
        _x((-1, 7, 5)), 0, input_length=_ids("n", (-1, 1)), padding_value=-1),
    "hsigmoid": lambda: layers.hsigmoid(_x((-1, 4)), _ids("l", (-1, 1)), 6),
    "hsigmoid-custom": lambda: layers.hsigmoid(
        _x((-1, 4)), _ids("l", (-1, 1)), 6, path_table=_ids("t", (-1, 3)),
        path_code=_ids("c", (-1, 3)), is_custom=True, bias_attr=False),
    "row_conv": lambda: layers.row_conv(_x((-1, 5, 4)), 2, act="relu"),
    "row_conv-lod": lambda: layers.row_conv(_ids("x", (-1, 4), "float32", 1), 1),
    "add_position_encoding-lod": lambda: layers.add_position_encoding(
        _ids("x", (-1, 4), "float32", 1), 1.0, 0.5),
    "fsp_matrix": lambda: layers.fsp_matrix(image(), image(name="img2")),
    "add_position_encoding": lambda: layers.add_position_encoding(_x((-1, 3, 4)), 1.0, 0.5),
    "affine_grid": lambda: layers.affine_grid(_x((-1, 2, 3)), [2, 1, 5, 6]),
    "grid_sampler": lambda: layers.grid_sampler(image(), _x((-1, 3, 3, 2), "g")),
    "nce": lambda: layers.nce(_x((-1, 4)), _ids("l", (-1, 1)), 30, num_neg_samples=4,
                              sampler="log_uniform", seed=7),
    "random_crop": lambda: layers.random_crop(image(), [3, 3, 4], seed=2),
    "sampled_softmax_with_cross_entropy": lambda: layers.sampled_softmax_with_cross_entropy(
        _x((-1, 20)), _ids("l", (-1, 1)), 5, seed=1),
    "similarity_focus": lambda: layers.similarity_focus(image(), 2, [0, 3]),
}
for _id, _build in LOSS_MORE_CASES.items():
    case(_id.split("-")[0], _id)(_build)  # test_every_layer_function_has_a_case reads CASES


@pytest.mark.parametrize("case_id", sorted(LOSS_MORE_CASES))
def test_loss_more_layers_round_trip(case_id):
    test_layer_round_trips(case_id)
# -- end issue 24: losses


# -- issue 24: host callbacks (py_func, Print) -------------------------------------------------
@case("py_func")
def _py_func():
    x = _x()
    out = graphc.default_main_program().global_block().create_var("pyout", [-1, 4], "float32")
    layers.py_func(lambda a: a, x, out, backward_func=lambda g: g,
                   skip_vars_in_backward_input=[x, out])
    layers.py_func(print, x, None)  # no outputs: an op run for its effect


@case("fc", "fc-weight-norm")
def _fc_weight_norm():
    # g and v are parameters the startup program initialises (g = ||v|| after v's init)
    layers.fc(_x(), 3, param_attr=graphc.fluid.WeightNormParamAttr(dim=1, name="wn"))


@case("Print")
def _print():
    layers.Print(_x(), first_n=2, message="m", summarize=3, print_phase="forward")


@pytest.mark.parametrize("case_id", ["py_func", "Print", "fc-weight-norm"])
def test_host_layers_round_trip(case_id):
    test_layer_round_trips(case_id)
# -- end issue 24: host callbacks (py_func, Print)


# -- issue 26: StaticRNN and the RNN-cell API ---------------------------------------------------
@case("StaticRNN")
def _static_rnn():
    x = graphc.data("seq", [5, -1, 3], "float32")
    rnn = layers.StaticRNN()
    with rnn.step():
        word = rnn.step_input(x)
        prev = rnn.memory(shape=[-1, 4], batch_ref=word, init_value=0.5)
        h = layers.fc([word, prev], 4, act="tanh")
        rnn.update_memory(prev, h)
        rnn.output(h, word)
    return rnn()


class _SumCell(layers.RNNCell):
    def call(self, inputs, states):
        new = layers.elementwise_add(layers.fc(inputs, 4), states)
        return new, new

    @property
    def state_shape(self):
        return [4]


@case("RNNCell")
def _rnn_cell():
    layers.rnn(_SumCell(), graphc.data("seq", [-1, 5, 3], "float32"))


@case("GRUCell")
def _gru_cell():
    layers.rnn(layers.GRUCell(4), graphc.data("seq", [-1, 5, 3], "float32"),
               sequence_length=graphc.data("len", [-1], "int64"), is_reverse=True)


@case("LSTMCell")
def _lstm_cell():
    layers.rnn(layers.LSTMCell(4), graphc.data("seq", [5, -1, 3], "float32"), time_major=True)


@case("rnn")
def _rnn():
    x = graphc.data("seq", [-1, 5, 3], "float32")
    layers.rnn(layers.GRUCell(4), x, initial_states=graphc.data("h0", [-1, 4], "float32"))


@pytest.mark.parametrize("case_id", ["StaticRNN", "RNNCell", "GRUCell", "LSTMCell", "rnn"])
def test_static_rnn_layers_round_trip(case_id):
    test_layer_round_trips(case_id)
# -- end issue 26: StaticRNN and the RNN-cell API


# -- issue 26: conditionals (cond, case, switch_case, ConditionalBlock, Switch, IfElse) ----------
def _pred(name="p"):
    return graphc.data(name, [1], "bool")


def _cond_nested():
    x = _x((-1, 3))
    layers.cond(_pred(), lambda: layers.cond(_pred("q"), lambda: x + 1.0, lambda: x),
                lambda: layers.fc(x, 3))


def _case_layer():
    x = _x((-1, 3))
    layers.case([(_pred(), lambda: x * 2.0), (_pred("q"), lambda: layers.relu(x))], lambda: x)


def _switch_case_layer():
    x = _x((-1, 3))
    layers.switch_case(graphc.data("i", [1], "int64"), [lambda: x, lambda: layers.tanh(x)])


def _conditional_block():
    x = _x((-1, 3))
    out = layers.fill_constant([1], "float32", 0.0)
    with layers.ConditionalBlock([_pred()], is_scalar_condition=True).block():
        layers.assign(layers.reduce_sum(x, dim=[0, 1]), out)


def _switch():
    lr = layers.create_global_var([1], 0.0, "float32", persistable=True, name="lr")
    with layers.Switch() as switch:
        with switch.case(_pred()):
            layers.assign(layers.fill_constant([1], "float32", 1.0), lr)
        with switch.case(_pred("q")):  # no default: lr keeps its value when no case holds
            layers.assign(layers.fill_constant([1], "float32", 2.0), lr)


def _ifelse():
    x = _x((-1, 3))
    ie = layers.IfElse(graphc.data("rows", [-1, 1], "bool"))
    with ie.true_block():
        ie.output(layers.fc(ie.input(x), 2))
    with ie.false_block():
        ie.output(layers.fc(ie.input(x), 2, act="relu"))
    ie()


COND_LAYER_CASES = {"cond": _cond_nested, "case": _case_layer,
                    "switch_case": _switch_case_layer, "ConditionalBlock": _conditional_block,
                    "Switch": _switch, "IfElse": _ifelse}
for _layer, _build in COND_LAYER_CASES.items():
    case(_layer)(_build)  # test_every_layer_function_has_a_case reads CASES when it runs


@pytest.mark.parametrize("case_id", sorted(COND_LAYER_CASES))
def test_conditional_layers_round_trip(case_id):
    test_layer_round_trips(case_id)
# -- end issue 26: conditionals


# -- issue 26: loops and tensor arrays ----------------------------------------------------------
def _while_loop_with_array():
    x = _x((-1, 3))
    i = layers.fill_constant([1], "int64", 0)
    n = layers.fill_constant([1], "int64", 3)
    cond = layers.less_than(i, n)
    h = layers.scale(x, 1.0)
    arr = layers.create_array("float32", capacity=4)
    loop = layers.While(cond)
    with loop.block():
        layers.assign(layers.fc(h, 3, act="tanh"), h)
        layers.array_write(h, i, array=arr)
        layers.increment(i)
        layers.less_than(i, n, cond=cond)
    layers.elementwise_add(layers.array_read(arr, layers.fill_constant([1], "int64", 1)),
                           layers.cast(layers.array_length(arr), "float32"))


def _while_loop_function():
    x = _x((-1, 3))
    layers.while_loop(lambda i, h: layers.less_than(i, layers.fill_constant([1], "int64", 2)),
                      lambda i, h: [layers.increment(i, in_place=False), layers.tanh(h)],
                      [layers.fill_constant([1], "int64", 0), x])


LOOP_LAYER_CASES = {"While": _while_loop_with_array, "while_loop": _while_loop_function,
                    "create_array": _while_loop_with_array,
                    "array_write": _while_loop_with_array,
                    "array_read": _while_loop_with_array,
                    "array_length": _while_loop_with_array}
for _layer, _build in LOOP_LAYER_CASES.items():
    case(_layer)(_build)  # test_every_layer_function_has_a_case reads CASES when it runs


@pytest.mark.parametrize("case_id", ["While", "while_loop"])
def test_loop_layers_round_trip(case_id):
    test_layer_round_trips(case_id)
# -- end issue 26: loops and tensor arrays


# -- issue 26: LoD ops of control-flow programs ---------------------------------------------------
def _beam_in(name, dtype, width=1):
    return graphc.data(name, [-1, width], dtype, lod_level=2)


LOD_CONTROL_LAYER_CASES = {
    "lod_reset": lambda: layers.lod_reset(_seq_in(), y=_seq_in("y", 1, level=2)),
    "lod_append": lambda: layers.lod_append(_seq_in(), graphc.data("lv", [5], "int32")),
    "lod_rank_table": lambda: layers.reorder_lod_tensor_by_rank(
        _seq_in(level=2), layers.lod_rank_table(_seq_in("s"))),
    "max_sequence_len": lambda: layers.max_sequence_len(layers.lod_rank_table(_seq_in())),
    "reorder_lod_tensor_by_rank": lambda: layers.reorder_lod_tensor_by_rank(
        graphc.data("rows", [-1, 3]), layers.lod_rank_table(_seq_in())),
    "beam_search": lambda: layers.beam_search(
        _beam_in("pre_ids", "int64"), _beam_in("pre_scores", "float32"),
        _beam_in("ids", "int64", 4), _beam_in("scores", "float32", 4), 4, end_id=1,
        return_parent_idx=True),
}
for _layer, _build in LOD_CONTROL_LAYER_CASES.items():
    case(_layer)(_build)  # test_every_layer_function_has_a_case reads CASES when it runs
case("lod_reset", "lod_reset-target_lod")(
    lambda: layers.lod_reset(graphc.data("dense", [6, 2]), target_lod=[0, 4, 6]))


@pytest.mark.parametrize("case_id", [*sorted(LOD_CONTROL_LAYER_CASES), "lod_reset-target_lod"])
def test_lod_control_layers_round_trip(case_id):
    test_layer_round_trips(case_id)
# -- end issue 26: LoD ops of control-flow programs


# -- issue 26: beam_search_decode over arrays of LoD values
@case("beam_search_decode")
def _beam_search_decode():
    i = layers.fill_constant([1], "int64", 0)
    ids = layers.array_write(_beam_in("ids", "int64"), i)
    scores = layers.array_write(_beam_in("scores", "float32"), i)
    layers.beam_search_decode(ids, scores, 4, end_id=1)


def test_beam_search_decode_round_trips():
    test_layer_round_trips("beam_search_decode")
# -- end issue 26: beam_search_decode


# -- issue 26: decoding ---------------------------------------------------------------------------
class _RoundTripCell:
    """A duck-typed cell for the decoders: h' = tanh([x, h] W)."""

    def __call__(self, inputs, states, **kwargs):
        h = layers.fc(layers.concat([inputs, states], axis=1), 4, act="tanh",
                      param_attr=graphc.ParamAttr(name="rt_cell_w"), bias_attr=False)
        return h, h


def _rt_embed(ids):
    import graphc.fluid as fluid
    return fluid.embedding(ids, size=[6, 3], param_attr=graphc.ParamAttr(name="rt_emb"))


def _rt_logits(h):
    return layers.fc(h, 6, num_flatten_dims=len(h.shape) - 1,
                     param_attr=graphc.ParamAttr(name="rt_out_w"), bias_attr=False)


def _beam_decode():
    h0 = layers.fc(_x((2, 3)), 4, act="tanh")
    dec = layers.BeamSearchDecoder(_RoundTripCell(), 0, 1, 2, embedding_fn=_rt_embed,
                                   output_fn=_rt_logits)
    layers.dynamic_decode(dec, inits=h0, max_step_num=3)


def _greedy_decode():
    h0 = layers.fc(_x((2, 3)), 4, act="tanh")
    helper = layers.GreedyEmbeddingHelper(_rt_embed, layers.fill_constant([2], "int64", 0), 1)
    layers.dynamic_decode(layers.BasicDecoder(_RoundTripCell(), helper, output_fn=_rt_logits),
                          inits=h0, max_step_num=3)


def _teacher_forced_decode():
    x = graphc.data("seq_x", [2, 3, 3], "float32")
    helper = layers.TrainingHelper(x, graphc.data("seq_len", [2], "int64"))
    outs, _ = layers.dynamic_decode(layers.BasicDecoder(_RoundTripCell(), helper),
                                    inits=layers.fill_constant([2, 4], "float32", 0.0),
                                    max_step_num=3)
    arr = layers.array_write(outs.cell_outputs, layers.fill_constant([1], "int64", 0))
    layers.tensor_array_to_tensor(arr, axis=0, use_stack=True)


DECODE_LAYER_CASES = {"BeamSearchDecoder": _beam_decode, "Decoder": _beam_decode,
                      "dynamic_decode": _greedy_decode, "BasicDecoder": _greedy_decode,
                      "GreedyEmbeddingHelper": _greedy_decode, "DecodeHelper": _greedy_decode,
                      "SampleEmbeddingHelper": _greedy_decode,
                      "TrainingHelper": _teacher_forced_decode,
                      "tensor_array_to_tensor": _teacher_forced_decode}
for _layer, _build in DECODE_LAYER_CASES.items():
    case(_layer)(_build)  # test_every_layer_function_has_a_case reads CASES when it runs


@pytest.mark.parametrize("case_id", ["BeamSearchDecoder", "dynamic_decode", "TrainingHelper"])
def test_decoding_layers_round_trip(case_id):
    test_layer_round_trips(case_id)
# -- end issue 26: decoding


# -- port24: fluid.contrib.layers (basic_lstm, basic_gru, shuffle_batch) -----------------------
@case("shuffle_batch")
def _shuffle_batch():
    from graphc.layers.reshuffle import shuffle_batch
    shuffle_batch(graphc.data("x", [-1, 2, 3]), seed=4)


@case("basic_lstm")
def _basic_lstm():
    from graphc.layers.basic_rnn import basic_lstm
    basic_lstm(graphc.data("seq", [-1, 4, 3]), None, None, 5, num_layers=2, bidirectional=True,
               sequence_length=graphc.data("lens", [-1], "int64"), dropout_prob=0.1)


@case("basic_gru")
def _basic_gru():
    from graphc.layers.basic_rnn import basic_gru
    basic_gru(graphc.data("seq", [4, -1, 3]), graphc.data("h0", [1, -1, 5]), 5,
              batch_first=False)


@pytest.mark.parametrize("case_id", ["shuffle_batch", "basic_lstm", "basic_gru"])
def test_contrib_layers_round_trip(case_id):
    test_layer_round_trips(case_id)
# -- end port24


# -- ctc: ctc_greedy_decoder's LoD form (ctc_align of a LoD value) --------------------------------
@case("ctc_greedy_decoder", "ctc_greedy_decoder-lod")
def _ctc_greedy_decoder_lod():
    layers.ctc_greedy_decoder(_ids("x", (-1, 5), "float32", 1), blank=4)


def test_ctc_greedy_decoder_lod_round_trips():
    test_layer_round_trips("ctc_greedy_decoder-lod")
# -- end ctc


# -- ifelse26: split_lod_tensor / merge_lod_tensor --------------------------------------------
@case("split_lod_tensor")
def _split_lod_tensor():
    x = graphc.data("x", [-1, 3], lod_level=2)
    m = graphc.data("m", [-1, 1], "bool")
    yes, no = layers.split_lod_tensor(x, m)
    layers.merge_lod_tensor(layers.tanh(yes), no, x, m)


@case("merge_lod_tensor")
def _merge_lod_tensor():
    x, m = graphc.data("x", [-1, 3]), graphc.data("m", [-1, 1], "bool")
    yes, no = layers.split_lod_tensor(x, m)
    layers.merge_lod_tensor(layers.fc(yes, 2), layers.fc(no, 2), m, m)


@pytest.mark.parametrize("case_id", ["split_lod_tensor", "merge_lod_tensor"])
def test_split_merge_layers_round_trip(case_id):
    test_layer_round_trips(case_id)
# -- end ifelse26


# -- arr2lod: lod_tensor_to_array / array_to_lod_tensor / shrink_memory ------------------------
@case("lod_tensor_to_array")
def _lod_tensor_to_array():
    x = graphc.data("x", [-1, 3], lod_level=2)
    table = layers.lod_rank_table(x)
    layers.array_to_lod_tensor(layers.lod_tensor_to_array(x, table, capacity=8), table)


@case("array_to_lod_tensor")
def _array_to_lod_tensor():
    x = graphc.data("x", [-1, 3], lod_level=1)
    table = layers.lod_rank_table(x)
    steps = layers.lod_tensor_to_array(x, table)
    i = layers.fill_constant([1], "int64", 0)
    layers.array_write(layers.tanh(layers.array_read(steps, i)), i, array=steps)
    layers.array_to_lod_tensor(steps, table)


@case("shrink_memory")
def _shrink_memory():
    table = layers.lod_rank_table(graphc.data("k", [-1, 1], lod_level=1))
    i = layers.fill_constant([1], "int64", 1)
    layers.shrink_memory(layers.shrink_memory(graphc.data("m", [4, 3]), i, table), i, table)


@pytest.mark.parametrize("case_id", ["lod_tensor_to_array", "array_to_lod_tensor",
                                     "shrink_memory"])
def test_arr2lod_layers_round_trip(case_id):
    test_layer_round_trips(case_id)
# -- end arr2lod


# -- nlp24: TDM's contrib layers (tdm_child, tdm_sampler, index_sample) -----------------------
@case("tdm_child")
def _tdm_child():
    from graphc.layers.tdm import tdm_child
    tdm_child(graphc.data("node", [-1, 1], "int64"), 7, 2)


@case("tdm_sampler")
def _tdm_sampler():
    from graphc.layers.tdm import tdm_sampler
    tdm_sampler(graphc.data("leaf", [-1, 1], "int64"), [1, 2], [2, 4], 4, seed=3,
                tree_dtype="int64", dtype="int64")


@case("index_sample")
def _index_sample():
    from graphc.layers.tdm import index_sample
    index_sample(graphc.data("x", [-1, 6]), graphc.data("index", [-1, 2], "int64"))


@pytest.mark.parametrize("case_id", ["tdm_child", "tdm_sampler", "index_sample"])
def test_nlp24_layers_round_trip(case_id):
    test_layer_round_trips(case_id)
# -- end nlp24
