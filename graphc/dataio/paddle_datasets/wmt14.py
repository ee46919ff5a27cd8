"""``paddle.dataset.wmt14``: the WMT-14 shrunk set (``wmt14.tgz``, with ``src.dict`` and
``trg.dict``) in ``DATA_HOME/wmt14``; (source ids, target ids, next target ids) samples."""

from __future__ import annotations

from . import common

__all__ = ["train", "test", "get_dict", "convert", "fetch"]

URL_DEV_TEST = "http://www-lium.univ-lemans.fr/~schwenk/cslm_joint_paper/data/dev+test.tgz"
MD5_DEV_TEST = "7d7897317ddd8ba0ae5c5fa7248d3ff5"
URL_TRAIN = "http://paddlemodels.bj.bcebos.com/wmt/wmt14.tgz"
MD5_TRAIN = "0791583d57d5beb693b9414c5b36798c"

START = "<s>"
END = "<e>"
UNK = "<unk>"
UNK_IDX = 2


def _to_dict(fd, size):
    out = {}
    for count, line in enumerate(fd):
        if count >= size:
            break
        out[line.strip().decode("utf-8")] = count
    return out


def _read_to_dict(tar_file, dict_size):
    with common.open_tar(tar_file) as f, common.reading(tar_file, "the WMT-14 archive"):
        dicts = []
        for suffix in ("src.dict", "trg.dict"):
            names = [m.name for m in f if m.name.endswith(suffix)]
            if len(names) != 1:
                raise common.DatasetFileError(f"{tar_file}: expected one *{suffix} in the "
                                              f"archive, found {len(names)}")
            dicts.append(_to_dict(common.tar_member(f, names[0], tar_file), dict_size))
    return dicts[0], dicts[1]


def reader_creator(tar_file, file_name, dict_size):
    def reader():
        src_dict, trg_dict = _read_to_dict(tar_file, dict_size)
        for mark in (START, END):
            if mark not in trg_dict:
                raise common.DatasetFileError(f"{tar_file}: trg.dict has no {mark}")
        with common.open_tar(tar_file) as f, common.reading(tar_file, "the WMT-14 archive"):
            names = [m.name for m in f if m.name.endswith(file_name)]
            for name in names:
                for line in common.tar_member(f, name, tar_file):
                    parts = line.decode("utf-8").strip().split("\t")
                    if len(parts) != 2:
                        continue
                    src_ids = [src_dict.get(w, UNK_IDX)
                               for w in [START, *parts[0].split(), END]]
                    trg_ids = [trg_dict.get(w, UNK_IDX) for w in parts[1].split()]
                    # sequences longer than 80 are left out, as Paddle does
                    if len(src_ids) > 80 or len(trg_ids) > 80:
                        continue
                    yield src_ids, [trg_dict[START], *trg_ids], [*trg_ids, trg_dict[END]]
    return reader


def train(dict_size):
    return reader_creator(common.download(URL_TRAIN, "wmt14", MD5_TRAIN), "train/train",
                          dict_size)


def test(dict_size):
    return reader_creator(common.download(URL_TRAIN, "wmt14", MD5_TRAIN), "test/test",
                          dict_size)


def gen(dict_size):
    return reader_creator(common.download(URL_TRAIN, "wmt14", MD5_TRAIN), "gen/gen",
                          dict_size)


def get_dict(dict_size, reverse=True):
    """(source dict, target dict); ``reverse`` maps ids to words, else words to ids."""
    src_dict, trg_dict = _read_to_dict(common.download(URL_TRAIN, "wmt14", MD5_TRAIN),
                                       dict_size)
    if reverse:
        src_dict = {v: k for k, v in src_dict.items()}
        trg_dict = {v: k for k, v in trg_dict.items()}
    return src_dict, trg_dict


def fetch():
    common.download(URL_TRAIN, "wmt14", MD5_TRAIN)


def convert(path):
    dict_size = 30000
    common.convert(path, train(dict_size), 1000, "wmt14_train")
