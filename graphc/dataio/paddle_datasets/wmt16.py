"""``paddle.dataset.wmt16``: the WMT-16 en-de set (``wmt16.tar.gz``) in ``DATA_HOME/wmt16``;
the word dictionaries are built from its training part and kept next to it, as Paddle does."""

from __future__ import annotations

import collections
import os

from . import common

__all__ = ["train", "test", "validation", "convert", "fetch", "get_dict"]

DATA_URL = "http://paddlemodels.bj.bcebos.com/wmt/wmt16.tar.gz"
DATA_MD5 = "0c38be43600334966403524a40dcd81e"

TOTAL_EN_WORDS = 11250
TOTAL_DE_WORDS = 19220

START_MARK = "<s>"
END_MARK = "<e>"
UNK_MARK = "<unk>"


def _check_lang(lang):
    if lang not in ("en", "de"):
        raise common.DatasetError(f"wmt16: language {lang!r}: only 'en' (English) and 'de' "
                                  "(German) are supported")


def _pairs(tar_file, file_name):
    with common.open_tar(tar_file) as f, common.reading(tar_file, "the WMT-16 archive"):
        for line in common.tar_member(f, file_name, tar_file):
            parts = line.decode("utf-8").strip().split("\t")
            if len(parts) == 2:
                yield parts


def _build_dict(tar_file, dict_size, save_path, lang):
    counts = collections.defaultdict(int)
    for en, de in _pairs(tar_file, "wmt16/train"):
        for w in (en if lang == "en" else de).split():
            counts[w] += 1
    # by falling count; equal counts keep first-seen order (Python's sort is stable)
    words = sorted(counts.items(), key=lambda x: x[1], reverse=True)[:max(dict_size - 3, 0)]
    text = "".join(f"{w}\n" for w in (START_MARK, END_MARK, UNK_MARK, *(w for w, _ in words)))
    common._write_atomic(save_path, lambda f: f.write(text.encode("utf-8")))


def _dict_path(lang, dict_size):
    return os.path.join(common.data_home(), "wmt16", f"{lang}_{dict_size}.dict")


def _load_dict(tar_file, dict_size, lang, reverse=False):
    dict_path = _dict_path(lang, dict_size)
    with common.reading(dict_path, "the dictionary"):
        if not os.path.exists(dict_path) or _line_count(dict_path) != dict_size:
            _build_dict(tar_file, dict_size, dict_path, lang)
        with open(dict_path, "rb") as fdict:
            lines = [line.strip().decode("utf-8") for line in fdict]
    if reverse:
        return dict(enumerate(lines))
    return {w: i for i, w in enumerate(lines)}


def _line_count(path):
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def _dict_sizes(src_dict_size, trg_dict_size, src_lang):
    src = min(src_dict_size, TOTAL_EN_WORDS if src_lang == "en" else TOTAL_DE_WORDS)
    trg = min(trg_dict_size, TOTAL_DE_WORDS if src_lang == "en" else TOTAL_EN_WORDS)
    return src, trg


def reader_creator(tar_file, file_name, src_dict_size, trg_dict_size, src_lang):
    def reader():
        src_dict = _load_dict(tar_file, src_dict_size, src_lang)
        trg_dict = _load_dict(tar_file, trg_dict_size, "de" if src_lang == "en" else "en")
        # the three marks have the same ids in both dictionaries (their first lines)
        start_id, end_id, unk_id = (src_dict[m] for m in (START_MARK, END_MARK, UNK_MARK))
        src_col = 0 if src_lang == "en" else 1
        for parts in _pairs(tar_file, file_name):
            src_ids = [start_id, *(src_dict.get(w, unk_id) for w in parts[src_col].split()),
                       end_id]
            trg_ids = [trg_dict.get(w, unk_id) for w in parts[1 - src_col].split()]
            yield src_ids, [start_id, *trg_ids], [*trg_ids, end_id]
    return reader


def _creator(file_name, src_dict_size, trg_dict_size, src_lang):
    _check_lang(src_lang)
    src_dict_size, trg_dict_size = _dict_sizes(src_dict_size, trg_dict_size, src_lang)
    return reader_creator(
        tar_file=common.download(DATA_URL, "wmt16", DATA_MD5, "wmt16.tar.gz"),
        file_name=file_name, src_dict_size=src_dict_size, trg_dict_size=trg_dict_size,
        src_lang=src_lang)


def train(src_dict_size, trg_dict_size, src_lang="en"):
    return _creator("wmt16/train", src_dict_size, trg_dict_size, src_lang)


def test(src_dict_size, trg_dict_size, src_lang="en"):
    return _creator("wmt16/test", src_dict_size, trg_dict_size, src_lang)


def validation(src_dict_size, trg_dict_size, src_lang="en"):
    return _creator("wmt16/val", src_dict_size, trg_dict_size, src_lang)


def get_dict(lang, dict_size, reverse=False):
    """The word dictionary a reader built (word -> id; id -> word if ``reverse``)."""
    _check_lang(lang)
    dict_size = min(dict_size, TOTAL_EN_WORDS if lang == "en" else TOTAL_DE_WORDS)
    dict_path = _dict_path(lang, dict_size)
    if not os.path.exists(dict_path):
        raise common.DatasetFileError(
            f"{dict_path}: the word dictionary does not exist; call "
            "paddle.dataset.wmt16.train/test/validation first to build it")
    return _load_dict(common.download(DATA_URL, "wmt16", DATA_MD5, "wmt16.tar.gz"),
                      dict_size, lang, reverse)


def fetch():
    common.download(DATA_URL, "wmt16", DATA_MD5, "wmt16.tar.gz")


def convert(path, src_dict_size, trg_dict_size, src_lang):
    common.convert(path, train(src_dict_size, trg_dict_size, src_lang), 1000, "wmt16_train")
