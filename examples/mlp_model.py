"""An example MODEL.py for `graphc compile` and `graphc explain-buckets`: a two-layer MLP with
batch norm, trained with Momentum.

The convention: a model file defines ``build()`` returning ``(main, startup, loss)`` (the
training program, its startup program and the loss Variable). It may also define
``feed(batch_size)`` returning a feed dict (name -> numpy array), used where graphc needs
data (e.g. to compile the step and count its collectives).

    graphc compile examples/mlp_model.py --strategy fast-single-device --timing
    graphc explain-buckets examples/mlp_model.py --strategy default --devices 4
"""

import numpy as np

import graphc as fluid


def build(hidden: int = 64, classes: int = 10):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [-1, 32], "float32")
        label = fluid.data("label", [-1, 1], "int64")
        h = fluid.layers.fc(x, hidden)
        h = fluid.layers.batch_norm(h, act="relu")
        h = fluid.layers.fc(h, hidden, act="relu")
        logits = fluid.layers.fc(h, classes)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, label))
        fluid.optimizer.Momentum(learning_rate=0.1, momentum=0.9).minimize(loss)
    return main, startup, loss


def feed(batch_size: int = 32):
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((batch_size, 32)).astype("float32"),
            "label": rng.integers(0, 10, (batch_size, 1)).astype("int64")}
