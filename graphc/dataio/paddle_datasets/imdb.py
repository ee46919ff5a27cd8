"""``paddle.dataset.imdb``: the aclImdb archive (``aclImdb_v1.tar.gz``) in ``DATA_HOME/imdb``;
reviews as word-id lists (words are bytes, as Paddle 1.8 yields them) and 0/1 labels."""

from __future__ import annotations

import collections
import re
import string

from . import common

__all__ = ["build_dict", "train", "test", "word_dict", "fetch", "convert"]

URL = "http://ai.stanford.edu/%7Eamaas/data/sentiment/aclImdb_v1.tar.gz"
MD5 = "7c2ac02c03563afcf9b574c7e56c153a"

_PUNCTUATION = string.punctuation.encode()


def tokenize(pattern):
    """The token lists (bytes, lower case, punctuation dropped) of the archive's files whose
    name matches ``pattern``, in archive order."""
    path = common.download(URL, "imdb", MD5)
    with common.open_tar(path) as tarf, common.reading(path, "the aclImdb archive"):
        member = tarf.next()
        while member is not None:
            if pattern.match(member.name):
                data = common.tar_member(tarf, member, path).read()
                yield data.rstrip(b"\n\r").translate(None, _PUNCTUATION).lower().split()
            member = tarf.next()


def build_dict(pattern, cutoff):
    """Words seen more than ``cutoff`` times, by falling frequency then the word, to ids
    0..n-1; ``<unk>`` is n."""
    word_freq = collections.defaultdict(int)
    for doc in tokenize(pattern):
        for word in doc:
            word_freq[word] += 1
    kept = sorted((x for x in word_freq.items() if x[1] > cutoff), key=lambda x: (-x[1], x[0]))
    word_idx = {w: i for i, (w, _) in enumerate(kept)}
    word_idx["<unk>"] = len(kept)
    return word_idx


def reader_creator(pos_pattern, neg_pattern, word_idx):
    """Reads the documents now: positive ones (label 0) then negative ones (label 1)."""
    unk = word_idx["<unk>"]
    instances = []
    for pattern, label in ((pos_pattern, 0), (neg_pattern, 1)):
        for doc in tokenize(pattern):
            instances.append(([word_idx.get(w, unk) for w in doc], label))

    def reader():
        yield from instances
    return reader


def train(word_idx):
    return reader_creator(re.compile(r"aclImdb/train/pos/.*\.txt$"),
                          re.compile(r"aclImdb/train/neg/.*\.txt$"), word_idx)


def test(word_idx):
    return reader_creator(re.compile(r"aclImdb/test/pos/.*\.txt$"),
                          re.compile(r"aclImdb/test/neg/.*\.txt$"), word_idx)


def word_dict():
    return build_dict(re.compile(r"aclImdb/((train)|(test))/((pos)|(neg))/.*\.txt$"), 150)


def fetch():
    common.download(URL, "imdb", MD5)


def convert(path):
    w = word_dict()
    common.convert(path, lambda: train(w), 1000, "imdb_train")
