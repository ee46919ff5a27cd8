"""``paddle.dataset.cifar``: CIFAR-10/100 "python version" archives (tar.gz of pickled
batches) in ``DATA_HOME/cifar``; samples are float32 [3072] images / 255 and int labels."""

from __future__ import annotations

import numpy as np

from . import common

__all__ = ["train100", "test100", "train10", "test10", "fetch", "convert"]

URL_PREFIX = "https://dataset.bj.bcebos.com/cifar/"
CIFAR10_URL = URL_PREFIX + "cifar-10-python.tar.gz"
CIFAR10_MD5 = "c58f30108f718f92721af3b95e74349a"
CIFAR100_URL = URL_PREFIX + "cifar-100-python.tar.gz"
CIFAR100_MD5 = "eb9058c3a382ffc7106e4002c42a8d85"


def _batch_samples(batch, where: str):
    if not isinstance(batch, dict) or b"data" not in batch:
        raise common.DatasetFileError(f"{where}: not a CIFAR batch (a dict with b'data')")
    labels = batch.get(b"labels", batch.get(b"fine_labels"))
    if labels is None:
        raise common.DatasetFileError(f"{where}: the batch has no b'labels' or b'fine_labels'")
    data = np.asarray(batch[b"data"])
    if data.ndim != 2 or len(data) != len(labels):
        raise common.DatasetFileError(f"{where}: {data.shape} data for {len(labels)} labels")
    for sample, label in zip(data, labels):
        yield (sample / 255.0).astype(np.float32), int(label)


def reader_creator(filename, sub_name, cycle=False):
    """Samples of every batch in the archive whose member name contains ``sub_name``, in
    archive order; ``cycle`` repeats the archive for ever."""
    def reader():
        while True:
            with common.open_tar(filename) as tar:
                with common.reading(filename, "the tar archive"):
                    names = [m.name for m in tar if sub_name in m.name]
                for name in names:
                    where = f"{filename}:{name}"
                    batch = common.load_pickle(common.tar_member(tar, name, filename), where,
                                               encoding="bytes")
                    yield from _batch_samples(batch, where)
            if not cycle:
                break
    return reader


def train100():
    return reader_creator(common.download(CIFAR100_URL, "cifar", CIFAR100_MD5), "train")


def test100():
    return reader_creator(common.download(CIFAR100_URL, "cifar", CIFAR100_MD5), "test")


def train10(cycle=False):
    return reader_creator(common.download(CIFAR10_URL, "cifar", CIFAR10_MD5), "data_batch",
                          cycle=cycle)


def test10(cycle=False):
    return reader_creator(common.download(CIFAR10_URL, "cifar", CIFAR10_MD5), "test_batch",
                          cycle=cycle)


def fetch():
    common.download(CIFAR10_URL, "cifar", CIFAR10_MD5)
    common.download(CIFAR100_URL, "cifar", CIFAR100_MD5)


def convert(path):
    common.convert(path, train100(), 1000, "cifar_train100")
