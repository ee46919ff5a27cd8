"""``paddle.dataset.uci_housing``: ``housing.data`` (506 rows of 13 features and the price)
in ``DATA_HOME/uci_housing``; features centred and range-scaled, an 80/20 split."""

from __future__ import annotations

import shutil
import tarfile
import tempfile

import numpy as np

from . import common

__all__ = ["train", "test", "fluid_model", "predict_reader", "fetch", "convert"]

URL = "http://paddlemodels.bj.bcebos.com/uci_housing/housing.data"
MD5 = "d4accdce7a25600298819f8e28e8d593"

# a tuple (Paddle's is a list): read-only here, indexed and iterated the same way
feature_names = ("CRIM", "ZN", "INDUS", "CHAS", "NOX", "RM", "AGE", "DIS", "RAD", "TAX",
                 "PTRATIO", "B", "LSTAT")

FLUID_URL_MODEL = ("https://github.com/PaddlePaddle/book/raw/develop/01.fit_a_line/fluid/"
                   "fit_a_line.fluid.tar")
FLUID_MD5_MODEL = "6e6dd637ccd5993961f68bfbde46090b"


def load_data(filename, feature_num=14, ratio=0.8):
    """The (train, test) rows of ``filename``: each feature minus its mean, over its range."""
    with common.reading(filename, "the housing data"):
        values = np.loadtxt(filename, dtype="float64", ndmin=1).reshape(-1)
    if values.size == 0 or values.size % feature_num:
        raise common.DatasetFileError(
            f"{filename}: {values.size} numbers is not a whole number of rows of "
            f"{feature_num} (13 features and the price)")
    data = values.reshape(-1, feature_num)
    maximums, minimums = data.max(axis=0), data.min(axis=0)
    avgs = data.sum(axis=0) / data.shape[0]
    spread = maximums - minimums
    spread[spread == 0] = 1.0  # a constant column stays 0 after centring (Paddle divides by 0)
    for i in range(feature_num - 1):
        data[:, i] = (data[:, i] - avgs[i]) / spread[i]
    offset = int(data.shape[0] * ratio)
    return data[:offset], data[offset:]


def _reader(part: int):
    rows = load_data(common.download(URL, "uci_housing", MD5))[part]

    def reader():
        for d in rows:
            yield d[:-1], d[-1:]
    return reader


def train():
    return _reader(0)


def test():
    return _reader(1)


def fluid_model():
    """The book's trained fit_a_line model (``fit_a_line.fluid.tar`` in the cache), unpacked
    into a new temporary folder whose path is returned."""
    parameter_tar = common.download(FLUID_URL_MODEL, "uci_housing", FLUID_MD5_MODEL,
                                    "fit_a_line.fluid.tar")
    dirpath = tempfile.mkdtemp()
    try:
        with common.reading(parameter_tar, "the model archive"), \
                tarfile.open(parameter_tar, mode="r") as tar:
            tar.extractall(path=dirpath, filter="data")  # no links or paths out of dirpath
    except BaseException:
        shutil.rmtree(dirpath, ignore_errors=True)  # nothing half-unpacked stays behind
        raise
    return dirpath


def predict_reader():
    """The first test row's features, as a one-element tuple."""
    return (load_data(common.download(URL, "uci_housing", MD5))[1][0][:-1],)


def fetch():
    common.download(URL, "uci_housing", MD5)


def convert(path):
    common.convert(path, train(), 1000, "uci_housing_train")

