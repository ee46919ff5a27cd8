"""Small reference models built with graphc's layers: the demo CNN, an MLP, ResNet, and
Paddle's bow_net (a sparse embedding), the CTR-DNN (LoD slots).

Shared by `graphc demo`, the benchmarks and the tests, so all of them speak of one model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import layers
from ..ir import unique_name
from ..ir.default_programs import program_guard
from ..ir.program import Program, Variable
from ..layers import data


@dataclass
class Model:
    """A built model: its programs and the variables a trainer feeds and fetches."""

    main: Program
    startup: Program
    feeds: list[Variable]
    loss: Variable
    metrics: dict[str, Variable] = field(default_factory=dict)


def demo_cnn(image_shape=(1, 28, 28), num_classes: int = 10, channels=(16, 32),
             data_layout: str = "NCHW") -> Model:
    """conv -> batch_norm -> relu -> pool, twice, then fc: the model `graphc demo` trains."""
    main, startup = Program(), Program()
    with program_guard(main, startup), unique_name.guard():
        c, h, w = image_shape
        shape = [-1, c, h, w] if data_layout == "NCHW" else [-1, h, w, c]
        image = data("image", shape, "float32")
        label = data("label", [-1, 1], "int64")
        x = image
        for ch in channels:
            x = layers.conv2d(x, ch, 3, padding=1, bias_attr=False, data_format=data_layout)
            x = layers.batch_norm(x, act="relu", data_layout=data_layout)
            x = layers.pool2d(x, 2, "max", 2, data_format=data_layout)
        logits = layers.fc(x, num_classes)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, label))
        acc = layers.accuracy(logits, label)
    return Model(main, startup, [image, label], loss, {"accuracy": acc, "logits": logits})


def mlp(input_dim: int = 784, hidden=(512, 512, 512), num_classes: int = 10,
        batch_norm: bool = True) -> Model:
    """fc (+ batch_norm) + relu per hidden layer, then fc and softmax cross-entropy."""
    main, startup = Program(), Program()
    with program_guard(main, startup), unique_name.guard():
        x = data("x", [-1, input_dim], "float32")
        label = data("label", [-1, 1], "int64")
        h = x
        for width in hidden:
            if batch_norm:
                h = layers.batch_norm(layers.fc(h, width), act="relu")
            else:
                h = layers.fc(h, width, act="relu")
        logits = layers.fc(h, num_classes)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, label))
        acc = layers.accuracy(logits, label)
    return Model(main, startup, [x, label], loss, {"accuracy": acc, "logits": logits})


def resnet(depth: int = 50, num_classes: int = 1000, image_shape=(3, 224, 224),
           data_layout: str = "NCHW", base_width: int = 64) -> Model:
    """ResNet (He et al.) with bottleneck blocks for depth 50/101/152, basic blocks for 18/34:
    conv + batch_norm (+ relu) everywhere, a residual elementwise_add per block.
    ``base_width``: the stem's and first stage's channels (64 in the paper; a few for tests
    and examples that must run on a CPU), doubled at each later stage."""
    blocks = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3),
              152: (3, 8, 36, 3)}
    if depth not in blocks:
        raise ValueError(f"resnet depth must be one of {sorted(blocks)}, got {depth}")
    bottleneck = depth >= 50
    main, startup = Program(), Program()

    def conv_bn(x, filters, size, stride=1, act="relu"):
        x = layers.conv2d(x, filters, size, stride=stride, padding=(size - 1) // 2,
                          bias_attr=False, data_format=data_layout)
        return layers.batch_norm(x, act=act, data_layout=data_layout)

    with program_guard(main, startup), unique_name.guard():
        c, h, w = image_shape
        shape = [-1, c, h, w] if data_layout == "NCHW" else [-1, h, w, c]
        image = data("image", shape, "float32")
        label = data("label", [-1, 1], "int64")
        x = conv_bn(image, base_width, 7, 2)
        x = layers.pool2d(x, 3, "max", 2, pool_padding=1, data_format=data_layout)
        channels_in = base_width
        for stage, count in enumerate(blocks[depth]):
            width = base_width * 2 ** stage
            for i in range(count):
                stride = 2 if i == 0 and stage > 0 else 1
                out_channels = width * 4 if bottleneck else width
                if bottleneck:
                    y = conv_bn(x, width, 1)
                    y = conv_bn(y, width, 3, stride)
                    y = conv_bn(y, out_channels, 1, act=None)
                else:
                    y = conv_bn(x, width, 3, stride)
                    y = conv_bn(y, width, 3, act=None)
                if stride != 1 or channels_in != out_channels:
                    x = conv_bn(x, out_channels, 1, stride, act=None)
                x = layers.elementwise_add(x, y, act="relu")
                channels_in = out_channels
        x = layers.pool2d(x, global_pooling=True, pool_type="avg", data_format=data_layout)
        logits = layers.fc(x, num_classes)
        loss = layers.mean(layers.softmax_with_cross_entropy(logits, label))
        acc = layers.accuracy(logits, label)
    return Model(main, startup, [image, label], loss, {"accuracy": acc, "logits": logits})


def bow_net(dict_dim: int = 5147, seq_len: int = 16, emb_dim: int = 128, hid_dim: int = 128,
            hid_dim2: int = 96, class_dim: int = 2, is_sparse: bool = True,
            padding_idx: int | None = 0, optimizer_fn=None) -> Model:
    """Paddle's bow_net (its pass tests' sparse model): embedding -> sum pool -> tanh ->
    fc tanh -> fc tanh -> fc softmax, cross-entropy mean.

    graphc has no LoD sequences: ``words`` is ``[-1, seq_len, 1]`` ids padded with
    ``padding_idx`` (whose embedding is zero), so the sum pool is a ``reduce_sum`` over the
    sequence axis, the sum over each sequence's real words. ``optimizer_fn()``, when given,
    returns the optimizer that minimises the loss (in the model's name scope)."""
    main, startup = Program(), Program()
    with program_guard(main, startup), unique_name.guard():
        words = data("words", [-1, seq_len, 1], "int64")
        label = data("label", [-1, 1], "int64")
        emb = layers.embedding(words, [dict_dim, emb_dim], is_sparse=is_sparse,
                               padding_idx=padding_idx)
        bow = layers.tanh(layers.reduce_sum(emb, dim=1))
        fc_1 = layers.fc(bow, hid_dim, act="tanh")
        fc_2 = layers.fc(fc_1, hid_dim2, act="tanh")
        prediction = layers.fc(fc_2, class_dim, act="softmax")
        loss = layers.mean(layers.cross_entropy(prediction, label))
        if optimizer_fn is not None:
            optimizer_fn().minimize(loss)
    return Model(main, startup, [words, label], loss, {"prediction": prediction})


def ctr_dnn(num_slots: int = 26, vocab: int = 1000, emb_dim: int = 10,
            hidden=(400, 400, 400), dense_dim: int = 13, is_sparse: bool = True,
            optimizer_fn=None) -> Model:
    """The CTR-DNN of Paddle's CPU training guide (PaddleRec's ``ctr-dnn``): ``num_slots``
    sparse slots of variable length (``lod_level=1`` int64 ids), each looked up in one shared
    embedding table and sum-pooled per sample, concatenated with ``dense_dim`` dense features,
    an fc relu stack, and a softmax over click / no click with cross-entropy.

    Feeds: ``dense_input`` ``[-1, dense_dim]``, ``C1`` .. ``C<num_slots>`` (LoD ids, one
    sequence per sample) and ``label`` ``[-1, 1]``; docs/lod.md says how slots are fed."""
    from ..build.param_attr import ParamAttr
    main, startup = Program(), Program()
    with program_guard(main, startup), unique_name.guard():
        dense = data("dense_input", [-1, dense_dim], "float32")
        slots = [data(f"C{i + 1}", [-1, 1], "int64", lod_level=1) for i in range(num_slots)]
        label = data("label", [-1, 1], "int64")
        pooled = []
        for ids in slots:
            emb = layers.embedding(ids, [vocab, emb_dim], is_sparse=is_sparse,
                                   param_attr=ParamAttr(name="SparseFeatFactors"))
            pooled.append(layers.sequence_pool(emb, "sum"))
        h = layers.concat([*pooled, dense], axis=1)
        for width in hidden:
            h = layers.fc(h, width, act="relu")
        prediction = layers.fc(h, 2, act="softmax")
        loss = layers.mean(layers.cross_entropy(prediction, label))
        if optimizer_fn is not None:
            optimizer_fn().minimize(loss)
    return Model(main, startup, [dense, *slots, label], loss, {"prediction": prediction})
