"""``paddle.dataset.sentiment``: NLTK's movie_reviews corpus (``corpora/movie_reviews.zip``
or the unpacked folder, under ``DATA_HOME`` as nltk.download puts it), read without NLTK."""

from __future__ import annotations

import collections
import os
import re
import zipfile
from itertools import chain

from . import common

__all__ = ["train", "test", "get_word_dict", "convert"]

NUM_TRAINING_INSTANCES = 1600
NUM_TOTAL_INSTANCES = 2000

_FILE = re.compile(r"(neg|pos)/(?!\.)[^/]*\.txt$")
# NLTK's PlaintextCorpusReader tokenizes with WordPunctTokenizer
_WORD = re.compile(r"\w+|[^\w\s]+")


class _Corpus:
    """The corpus files (category/name.txt -> text), from the folder or the zip."""

    def __init__(self):
        home = common.data_home()
        folder = os.path.join(home, "corpora", "movie_reviews")
        archive = folder + ".zip"
        self.files: dict[str, str] = {}
        if os.path.isdir(folder):
            for cat in ("neg", "pos"):
                sub = os.path.join(folder, cat)
                for name in sorted(os.listdir(sub)) if os.path.isdir(sub) else ():
                    if _FILE.match(f"{cat}/{name}"):
                        path = os.path.join(sub, name)
                        with common.reading(path, "the review"), open(path, "rb") as f:
                            self.files[f"{cat}/{name}"] = f.read().decode("ascii")
            where = folder
        elif os.path.isfile(archive):
            with common.reading(archive, "the movie_reviews zip"), \
                    zipfile.ZipFile(archive) as z:
                for name in sorted(z.namelist()):
                    rel = name.removeprefix("movie_reviews/")
                    if _FILE.match(rel):
                        self.files[rel] = z.read(name).decode("ascii")
            where = archive
        else:
            raise common.DatasetFileError(
                f"paddle.dataset.sentiment: neither {archive} nor {folder} is there and graphc "
                "never downloads; put NLTK's movie_reviews corpus there (python -m nltk."
                f"downloader -d {home} movie_reviews, on a machine with network)")
        if not self.files:
            raise common.DatasetFileError(f"{where}: no neg/*.txt or pos/*.txt reviews in it")
        self.fileids = sorted(self.files)

    def category_fileids(self, category):
        return [f for f in self.fileids if f.startswith(category + "/")]

    def words(self, fileid):
        return _WORD.findall(self.files[fileid])


def _word_dict(corpus):
    freq = collections.defaultdict(int)
    for category in ("neg", "pos"):
        for fileid in corpus.category_fileids(category):
            for word in corpus.words(fileid):
                freq[word] += 1
    # by falling frequency, ties in first-seen order (what Paddle's cmp sort meant)
    ranked = sorted(freq.items(), key=lambda x: -x[1])
    return [(word, index) for index, (word, _) in enumerate(ranked)]


def get_word_dict():
    """[(word, id)] by falling frequency over the whole corpus."""
    return _word_dict(_Corpus())


def sort_files():
    """The file ids alternating neg, pos, neg, pos, ..."""
    corpus = _Corpus()
    return list(chain.from_iterable(zip(corpus.category_fileids("neg"),
                                        corpus.category_fileids("pos"))))


def load_sentiment_data():
    """[(word ids, 0 for neg / 1 for pos)] in ``sort_files`` order."""
    corpus = _Corpus()
    words_ids = dict(_word_dict(corpus))
    files = chain.from_iterable(zip(corpus.category_fileids("neg"),
                                    corpus.category_fileids("pos")))
    data_set = []
    for sample_file in files:
        category = 0 if "neg" in sample_file else 1
        ids = [words_ids.get(w.lower(), words_ids.get(w)) for w in corpus.words(sample_file)]
        data_set.append((ids, category))
    return data_set


def reader_creator(data):
    for each in data:
        yield each[0], each[1]


def train():
    """A generator (Paddle 1.8 returns one, not a reader creator) over the first 1600."""
    return reader_creator(load_sentiment_data()[:NUM_TRAINING_INSTANCES])


def test():
    return reader_creator(load_sentiment_data()[NUM_TRAINING_INSTANCES:])


def fetch():
    _Corpus()


def convert(path):
    common.convert(path, train, 1000, "sentiment_train")
