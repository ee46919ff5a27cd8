"""The main job: train the demo CNN on scikit-learn's bundled 8x8 digits (no download).

`make demo` / `graphc demo` run it: progress bar, per-epoch loss, test accuracy.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..build import optimizers as optimizer
from ..ir.default_programs import program_guard
from ..runtime.executor import Executor
from ..runtime.scope import Scope
from .models import demo_cnn


@dataclass
class DemoResult:
    losses: list[float]  # mean training loss per epoch
    test_accuracy: float
    seconds: float
    steps: int


def load_digits_split(test_fraction: float = 0.2, seed: int = 0):
    """(x_train, y_train, x_test, y_test): images [N, 1, 8, 8] in [0, 1], labels [N, 1]."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    x = (digits.images / 16.0).astype("float32")[:, None, :, :]
    y = digits.target.astype("int64")[:, None]
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def train_demo(epochs: int = 8, batch_size: int = 64, learning_rate: float = 0.05,
               seed: int = 0, progress: bool = True, log=print) -> DemoResult:
    x_train, y_train, x_test, y_test = load_digits_split(seed=seed)
    model = demo_cnn(image_shape=(1, 8, 8), channels=(16, 32))
    model.main.random_seed = model.startup.random_seed = seed
    test_program = model.main.clone(for_test=True)
    with program_guard(model.main, model.startup):
        optimizer.Momentum(learning_rate, momentum=0.9).minimize(model.loss)
    scope = Scope()
    exe = Executor()
    exe.run(model.startup, scope=scope)
    rng = np.random.default_rng(seed)
    steps_per_epoch = len(x_train) // batch_size  # equal batches: one compiled step
    losses, t0 = [], time.perf_counter()
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=epochs * steps_per_epoch, unit="step", leave=False)
    for epoch in range(epochs):
        order = rng.permutation(len(x_train))
        epoch_loss = 0.0
        for i in range(steps_per_epoch):
            idx = order[i * batch_size:(i + 1) * batch_size]
            (loss,) = exe.run(model.main, feed={"image": x_train[idx], "label": y_train[idx]},
                              fetch_list=[model.loss], scope=scope)
            epoch_loss += float(loss[0])
            if bar is not None:
                bar.update(1)
                bar.set_postfix(epoch=epoch + 1, loss=f"{float(loss[0]):.4f}")
        losses.append(epoch_loss / steps_per_epoch)
        if log:
            msg = f"epoch {epoch + 1}/{epochs}: train loss {losses[-1]:.4f}"
            (bar.write if bar is not None else log)(msg)
    if bar is not None:
        bar.close()
    (acc,) = exe.run(test_program, feed={"image": x_test, "label": y_test},
                     fetch_list=[model.metrics["accuracy"].name], scope=scope)
    return DemoResult(losses, float(acc[0]), time.perf_counter() - t0,
                      epochs * steps_per_epoch)
