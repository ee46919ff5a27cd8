"""Small reference models built with graphc's layers: the demo CNN and an MLP.

Shared by `graphc demo`, the benchmarks and the tests, so all of them speak of one model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from . import layers
from .ir import unique_name
from .ir.program import Program, Variable, program_guard
from .layers import data


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
