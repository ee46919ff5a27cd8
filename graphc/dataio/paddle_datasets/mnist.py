"""``paddle.dataset.mnist``: the gzipped IDX files in ``DATA_HOME/mnist``; each sample is a
float32 image of 784 values scaled to [-1, 1] and an int label, as Paddle 1.8 yields them."""

from __future__ import annotations

import gzip

import numpy as np

from . import common

__all__ = ["train", "test", "fetch", "convert"]

URL_PREFIX = "https://dataset.bj.bcebos.com/mnist/"
TEST_IMAGE_URL = URL_PREFIX + "t10k-images-idx3-ubyte.gz"
TEST_IMAGE_MD5 = "9fb629c4189551a2d022fa330f9573f3"
TEST_LABEL_URL = URL_PREFIX + "t10k-labels-idx1-ubyte.gz"
TEST_LABEL_MD5 = "ec29112dd5afa0611ce80d1b7f02629c"
TRAIN_IMAGE_URL = URL_PREFIX + "train-images-idx3-ubyte.gz"
TRAIN_IMAGE_MD5 = "f68b3c2dcbeaaa9fbdd348bbdeb94873"
TRAIN_LABEL_URL = URL_PREFIX + "train-labels-idx1-ubyte.gz"
TRAIN_LABEL_MD5 = "d53e105ee54ea40749a09fcbaf2e5b5c"


def _idx(path: str, magic: int, header_ints: int) -> tuple[tuple[int, ...], bytes]:
    with common.reading(path, "the gzipped IDX file"), gzip.open(path, "rb") as f:
        data = f.read()
    header = np.frombuffer(data[:4 * header_ints], dtype=">i4")
    if header.size != header_ints or header[0] != magic:
        raise common.DatasetFileError(f"{path}: not an IDX file with magic number {magic}")
    return tuple(int(v) for v in header[1:]), data[4 * header_ints:]


def reader_creator(image_filename, label_filename, buffer_size):
    """Samples ``(image, label)`` of the two IDX files (``buffer_size`` is accepted for
    Paddle's signature; the files are read whole)."""
    def reader():
        (n, rows, cols), pixels = _idx(image_filename, 2051, 4)
        (n_labels,), labels = _idx(label_filename, 2049, 2)
        if n != n_labels or len(pixels) != n * rows * cols or len(labels) != n:
            raise common.DatasetFileError(
                f"{image_filename} and {label_filename} do not match ({n} images of "
                f"{rows}x{cols} in {len(pixels)} bytes, {n_labels} labels)")
        images = np.frombuffer(pixels, dtype=np.uint8).reshape(n, rows * cols)
        label_values = np.frombuffer(labels, dtype=np.uint8)
        for i in range(n):
            yield images[i].astype("float32") / 255.0 * 2.0 - 1.0, int(label_values[i])
    return reader


def train():
    """The 60,000 training images (``train-*-idx?-ubyte.gz``)."""
    return reader_creator(common.download(TRAIN_IMAGE_URL, "mnist", TRAIN_IMAGE_MD5),
                          common.download(TRAIN_LABEL_URL, "mnist", TRAIN_LABEL_MD5), 100)


def test():
    """The 10,000 test images (``t10k-*-idx?-ubyte.gz``)."""
    return reader_creator(common.download(TEST_IMAGE_URL, "mnist", TEST_IMAGE_MD5),
                          common.download(TEST_LABEL_URL, "mnist", TEST_LABEL_MD5), 100)


def fetch():
    """Checks that the four files are in the cache (graphc never downloads)."""
    for url, md5 in ((TRAIN_IMAGE_URL, TRAIN_IMAGE_MD5), (TRAIN_LABEL_URL, TRAIN_LABEL_MD5),
                     (TEST_IMAGE_URL, TEST_IMAGE_MD5), (TEST_LABEL_URL, TEST_LABEL_MD5)):
        common.download(url, "mnist", md5)


def convert(path):
    common.convert(path, train(), 1000, "minist_train")
