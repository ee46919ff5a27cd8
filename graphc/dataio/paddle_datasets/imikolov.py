"""``paddle.dataset.imikolov``: the PTB ``simple-examples.tgz`` in ``DATA_HOME/imikolov``;
n-grams or (source, target) sequences of word ids, words as bytes as Paddle 1.8 reads them."""

from __future__ import annotations

import collections

from . import common

__all__ = ["train", "test", "build_dict", "fetch", "convert"]

URL = "http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz"
MD5 = "30177ea32e27c525793142b6bf2c8e2d"


class DataType:
    NGRAM = 1
    SEQ = 2


def word_count(f, word_freq=None):
    """Word counts of the lines of ``f``, each line adding one ``<s>`` and one ``<e>``."""
    if word_freq is None:
        word_freq = collections.defaultdict(int)
    for line in f:
        for w in line.strip().split():
            word_freq[w] += 1
        word_freq["<s>"] += 1
        word_freq["<e>"] += 1
    return word_freq


def _sort_key(item):
    # words are bytes, the markers str (as in Paddle): order ties by the encoded word
    w = item[0]
    return -item[1], w if isinstance(w, bytes) else w.encode()


def build_dict(min_word_freq=50):
    """Words (train and valid sets) seen more than ``min_word_freq`` times, by falling
    frequency, to ids; ``<unk>`` is the last id."""
    path = common.download(URL, "imikolov", MD5)
    with common.open_tar(path) as tf, common.reading(path, "the PTB archive"):
        trainf = common.tar_member(tf, "./simple-examples/data/ptb.train.txt", path)
        testf = common.tar_member(tf, "./simple-examples/data/ptb.valid.txt", path)
        word_freq = word_count(testf, word_count(trainf))
    word_freq.pop(b"<unk>", None)  # <unk> is placed last below
    word_freq.pop("<unk>", None)
    kept = sorted((x for x in word_freq.items() if x[1] > min_word_freq), key=_sort_key)
    word_idx = {w: i for i, (w, _) in enumerate(kept)}
    word_idx["<unk>"] = len(kept)
    return word_idx


def reader_creator(filename, word_idx, n, data_type):
    def reader():
        path = common.download(URL, "imikolov", MD5)
        unk = word_idx["<unk>"]
        with common.open_tar(path) as tf, common.reading(path, "the PTB archive"):
            for line in common.tar_member(tf, filename, path):
                if data_type == DataType.NGRAM:
                    if n <= -1:
                        raise common.DatasetError(f"imikolov: invalid gram length {n}")
                    words = ["<s>", *line.strip().split(), "<e>"]
                    if len(words) >= n:
                        ids = [word_idx.get(w, unk) for w in words]
                        for i in range(n, len(ids) + 1):
                            yield tuple(ids[i - n:i])
                elif data_type == DataType.SEQ:
                    ids = [word_idx.get(w, unk) for w in line.strip().split()]
                    src_seq = [word_idx["<s>"], *ids]
                    trg_seq = [*ids, word_idx["<e>"]]
                    if n > 0 and len(src_seq) > n:
                        continue
                    yield src_seq, trg_seq
                else:
                    raise common.DatasetError(
                        f"imikolov: unknown data_type {data_type!r} (DataType.NGRAM or .SEQ)")
    return reader


def train(word_idx, n, data_type=DataType.NGRAM):
    return reader_creator("./simple-examples/data/ptb.train.txt", word_idx, n, data_type)


def test(word_idx, n, data_type=DataType.NGRAM):
    return reader_creator("./simple-examples/data/ptb.valid.txt", word_idx, n, data_type)


def fetch():
    common.download(URL, "imikolov", MD5)


def convert(path):
    n = 5
    word_dict = build_dict()
    common.convert(path, train(word_dict, n), 1000, "imikolov_train")
