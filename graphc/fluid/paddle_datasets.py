"""Paddle's download datasets (``paddle.dataset.uci_housing``, ``.mnist``) read from the files
Paddle's cache already holds (~/.cache/paddle/dataset); graphc never downloads anything."""

from __future__ import annotations

import gzip
import os
from types import SimpleNamespace

import numpy as np

from ..ir.errors import GraphcError

__all__ = ["DATA_HOME", "DatasetFileError", "mnist", "uci_housing"]


class DatasetFileError(GraphcError):
    """A Paddle dataset file is missing from the cache or is not in the expected format."""


def data_home() -> str:
    """Paddle's cache directory, read when a reader starts (so HOME may change in between)."""
    return os.path.expanduser(os.path.join("~", ".cache", "paddle", "dataset"))


DATA_HOME = data_home()


def _cached(dataset: str, name: str) -> str:
    path = os.path.join(data_home(), dataset, name)
    if not os.path.isfile(path):
        raise DatasetFileError(
            f"paddle.dataset.{dataset}: {path} is not there and graphc never downloads; copy "
            f"the file from a machine where Paddle fetched it (Paddle's cache layout), or feed "
            "your own arrays")
    return path


# -- uci_housing: 506 rows of 13 features + the price; features centred and range-scaled ----

def _uci_rows(ratio: float = 0.8) -> tuple[np.ndarray, np.ndarray]:
    path = _cached("uci_housing", "housing.data")
    values = np.loadtxt(path, dtype="float64").reshape(-1)
    if values.size % 14:
        raise DatasetFileError(f"{path}: {values.size} numbers is not a whole number of rows "
                               "of 14 (13 features and the price)")
    rows = values.reshape(-1, 14)
    features = rows[:, :13]
    spread = features.max(axis=0) - features.min(axis=0)
    spread[spread == 0] = 1.0  # a constant column stays 0 after centring
    rows = np.concatenate([(features - features.mean(axis=0)) / spread, rows[:, 13:]], axis=1)
    split = int(rows.shape[0] * ratio)
    return rows[:split], rows[split:]


def _uci_reader(part: int):
    def reader():
        for row in _uci_rows()[part]:
            yield row[:-1], row[-1:]
    return reader


uci_housing = SimpleNamespace(
    train=lambda: _uci_reader(0), test=lambda: _uci_reader(1),
    feature_names=["CRIM", "ZN", "INDUS", "CHAS", "NOX", "RM", "AGE", "DIS", "RAD", "TAX",
                   "PTRATIO", "B", "LSTAT"])


# -- mnist: IDX files (gzip); images scaled to [-1, 1] as float32 [784], labels as int -------

def _idx(path: str, magic: int, header_ints: int) -> tuple[tuple[int, ...], bytes]:
    with gzip.open(path, "rb") as f:
        data = f.read()
    header = np.frombuffer(data[:4 * header_ints], dtype=">i4")
    if header.size != header_ints or header[0] != magic:
        raise DatasetFileError(f"{path}: not an IDX file with magic number {magic}")
    return tuple(int(v) for v in header[1:]), data[4 * header_ints:]


def _mnist_reader(images_name: str, labels_name: str):
    def reader():
        (n, rows, cols), pixels = _idx(_cached("mnist", images_name), 2051, 4)
        (n_labels,), labels = _idx(_cached("mnist", labels_name), 2049, 2)
        if n != n_labels or len(pixels) != n * rows * cols or len(labels) != n:
            raise DatasetFileError(f"mnist: {images_name} and {labels_name} do not match "
                                   f"({n} images of {rows}x{cols}, {n_labels} labels)")
        images = np.frombuffer(pixels, dtype=np.uint8).reshape(n, rows * cols)
        label_values = np.frombuffer(labels, dtype=np.uint8)
        for i in range(n):
            yield (images[i].astype("float32") / 255.0 * 2.0 - 1.0), int(label_values[i])
    return reader


mnist = SimpleNamespace(
    train=lambda: _mnist_reader("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    test=lambda: _mnist_reader("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"))
