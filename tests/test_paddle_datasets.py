"""paddle.dataset.* (graphc.dataset.<name>) reads Paddle's cached files in their real formats:
each test writes a tiny file in that format into a temporary DATA_HOME and reads it back."""

from __future__ import annotations

import gzip
import importlib
import io
import os
import pickle
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

import graphc
import graphc as paddle
from graphc.dataio.paddle_datasets import common
from graphc.dataio.paddle_datasets.common import DatasetFileError


@pytest.fixture
def data_home():
    """Set ``common.DATA_HOME`` as a script does; the assignment is removed afterwards (so
    DATA_HOME follows HOME again: monkeypatch would leave the old value assigned)."""
    def set_home(path):
        common.DATA_HOME = str(path)
    yield set_home
    vars(common).pop("DATA_HOME", None)


@pytest.fixture
def home(tmp_path, monkeypatch, data_home):
    """A DATA_HOME of the test's own, holding files of our own (so no md5 check)."""
    root = tmp_path / "paddle-cache"
    root.mkdir()
    data_home(root)
    monkeypatch.setenv("GRAPHC_DATASET_CHECK_MD5", "0")
    return root


def _tar(path, members: dict[str, bytes]):
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def _zip(path, members: dict[str, bytes]):
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)


# -- common ------------------------------------------------------------------------------------

def test_common_names_and_data_home(tmp_path, monkeypatch, data_home):
    assert paddle.dataset.common is common
    assert importlib.import_module("graphc.dataset.common") is common
    monkeypatch.setenv("HOME", str(tmp_path))
    assert common.DATA_HOME == str(tmp_path / ".cache" / "paddle" / "dataset")
    data_home(tmp_path / "elsewhere")
    with pytest.raises(DatasetFileError, match="elsewhere/mnist/x.gz is not there"):
        common.download("https://host/x.gz", "mnist", "0" * 32)


def test_download_checks_md5_and_says_where_to_put_the_file(tmp_path, monkeypatch, data_home):
    data_home(tmp_path)
    monkeypatch.delenv("GRAPHC_DATASET_CHECK_MD5", raising=False)
    with pytest.raises(DatasetFileError) as err:
        paddle.dataset.uci_housing.train()
    message = str(err.value)
    assert f"{tmp_path}/uci_housing/housing.data is not there" in message
    assert "never downloads" in message and "d4accdce7a25600298819f8e28e8d593" in message
    (tmp_path / "uci_housing").mkdir()
    data = tmp_path / "uci_housing" / "housing.data"
    data.write_text(" ".join(["1"] * 14) + "\n")
    assert common.md5file(str(data)) == __import__("hashlib").md5(data.read_bytes()).hexdigest()
    with pytest.raises(DatasetFileError, match="has md5 .*GRAPHC_DATASET_CHECK_MD5=0"):
        paddle.dataset.uci_housing.train()
    # the right md5 (Paddle's constant, patched to this file's) returns the path
    monkeypatch.setattr(paddle.dataset.uci_housing, "MD5", common.md5file(str(data)))
    assert common.download(paddle.dataset.uci_housing.URL, "uci_housing",
                           paddle.dataset.uci_housing.MD5) == str(data)
    assert len(list(paddle.dataset.uci_housing.train()())) == 0  # 1 row: 0.8 of it is 0


def test_split_and_cluster_files_reader(tmp_path):
    samples = [(np.arange(3) + i, i) for i in range(7)]
    pattern = str(tmp_path / "part-%05d.pickle")
    common.split(lambda: iter(samples), 3, suffix=pattern)
    files = sorted(os.listdir(tmp_path))
    # Paddle 1.8 cuts after samples 3 and 6: files of 4, 3 and 0 -> two files and a rest
    assert files == ["part-00000.pickle", "part-00001.pickle"]
    back = list(common.cluster_files_reader(str(tmp_path / "part-*.pickle"), 1, 0)())
    assert [s[1] for s in back] == list(range(7))
    np.testing.assert_array_equal(back[5][0], samples[5][0])
    second = list(common.cluster_files_reader(str(tmp_path / "part-*.pickle"), 2, 1)())
    assert [s[1] for s in second] == [4, 5, 6]
    with pytest.raises(DatasetFileError, match="RecordIO"):
        common.convert(str(tmp_path), lambda: iter(samples), 3, "x")


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_a_malicious_pickle_is_refused(tmp_path):
    bad = tmp_path / "evil-00000.pickle"
    bad.write_bytes(pickle.dumps([_Evil()]))
    with pytest.raises(DatasetFileError, match=r"evil-00000.pickle: the pickle asks for "
                                               r"(posix|os)\.system"):
        list(common.cluster_files_reader(str(tmp_path / "evil-*.pickle"), 1, 0)())


# -- mnist ---------------------------------------------------------------------------------------

def _write_mnist(root, prefix, pixels, labels):
    folder = root / "mnist"
    folder.mkdir(exist_ok=True)
    n = len(labels)
    header = np.array([2051, n, 2, 3], dtype=">i4").tobytes()
    (folder / f"{prefix}-images-idx3-ubyte.gz").write_bytes(
        gzip.compress(header + pixels.astype(np.uint8).tobytes()))
    (folder / f"{prefix}-labels-idx1-ubyte.gz").write_bytes(
        gzip.compress(np.array([2049, n], dtype=">i4").tobytes()
                      + np.asarray(labels, np.uint8).tobytes()))


def test_mnist_idx_gz(home):
    pixels = np.arange(4 * 6).reshape(4, 6) * 10
    _write_mnist(home, "train", pixels, [3, 1, 4, 1])
    samples = list(paddle.dataset.mnist.train()())
    assert [label for _, label in samples] == [3, 1, 4, 1]
    image = samples[2][0]
    assert image.dtype == np.float32 and image.shape == (6,)
    np.testing.assert_allclose(image, pixels[2] / 255.0 * 2.0 - 1.0, atol=1e-6)
    assert -1.0 <= image.min() and image.max() <= 1.0
    # a wrong-format file: a graphc error naming it
    (home / "mnist" / "train-labels-idx1-ubyte.gz").write_bytes(b"not gzip at all")
    with pytest.raises(DatasetFileError, match="train-labels-idx1-ubyte.gz: the gzipped IDX"):
        list(paddle.dataset.mnist.train()())


# -- cifar ---------------------------------------------------------------------------------------

def _cifar_batch(n, seed, key=b"labels"):
    rng = np.random.default_rng(seed)
    return {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
            key: [int(v) for v in rng.integers(0, 10, n)], b"batch_label": b"x"}


def test_cifar_pickled_batches_in_tar_gz(home):
    b1, b2, t = _cifar_batch(3, 1), _cifar_batch(2, 2), _cifar_batch(2, 3)
    _tar(home / "cifar" / "cifar-10-python.tar.gz", {
        "cifar-10-batches-py/data_batch_1": pickle.dumps(b1, protocol=2),
        "cifar-10-batches-py/data_batch_2": pickle.dumps(b2, protocol=2),
        "cifar-10-batches-py/test_batch": pickle.dumps(t, protocol=2),
        "cifar-10-batches-py/batches.meta": pickle.dumps({b"label_names": []}, protocol=2)})
    train = list(paddle.dataset.cifar.train10()())
    assert len(train) == 5
    assert train[0][0].dtype == np.float32 and train[0][0].shape == (3072,)
    np.testing.assert_allclose(train[4][0], b2[b"data"][1] / 255.0, rtol=1e-6)
    assert [s[1] for s in train] == b1[b"labels"] + b2[b"labels"]
    assert [s[1] for s in paddle.dataset.cifar.test10()()] == t[b"labels"]
    cyc = paddle.dataset.cifar.test10(cycle=True)()
    assert [next(cyc)[1] for _ in range(5)] == (t[b"labels"] * 3)[:5]
    # Paddle's real archive was pickled by Python 2's numpy: numpy.core's globals, str as bytes
    legacy = pickle.dumps(t, protocol=2).replace(b"cnumpy._core.multiarray\n",
                                                 b"cnumpy.core.multiarray\n")
    assert b"cnumpy.core.multiarray\n_reconstruct" in legacy
    _tar(home / "cifar" / "cifar-10-python.tar.gz", {"cifar-10-batches-py/test_batch": legacy})
    np.testing.assert_allclose(next(paddle.dataset.cifar.test10()())[0],
                               t[b"data"][0] / 255.0, rtol=1e-6)
    c100 = _cifar_batch(2, 4, key=b"fine_labels")
    _tar(home / "cifar" / "cifar-100-python.tar.gz",
         {"cifar-100-python/train": pickle.dumps(c100, protocol=2)})
    assert [s[1] for s in paddle.dataset.cifar.train100()()] == c100[b"fine_labels"]


def test_cifar_refuses_a_malicious_pickle_and_a_wrong_file(home):
    _tar(home / "cifar" / "cifar-10-python.tar.gz",
         {"cifar-10-batches-py/data_batch_1": pickle.dumps(_Evil())})
    with pytest.raises(DatasetFileError, match="data_batch_1: the pickle asks for"):
        list(paddle.dataset.cifar.train10()())
    (home / "cifar" / "cifar-10-python.tar.gz").write_bytes(b"\x00" * 100)
    with pytest.raises(DatasetFileError, match="cifar-10-python.tar.gz: the tar archive is "
                                               "not in the expected format"):
        list(paddle.dataset.cifar.train10()())


# -- uci_housing ---------------------------------------------------------------------------------

def test_uci_housing_text(home):
    rows = np.random.default_rng(0).uniform(0, 50, (10, 14)).round(3)
    (home / "uci_housing").mkdir()
    np.savetxt(home / "uci_housing" / "housing.data", rows, fmt="%.3f")
    train = list(paddle.dataset.uci_housing.train()())
    test = list(paddle.dataset.uci_housing.test()())
    assert (len(train), len(test)) == (8, 2)
    f = rows[:, :13]
    np.testing.assert_allclose(np.stack([x for x, _ in train + test]),
                               (f - f.mean(0)) / (f.max(0) - f.min(0)), rtol=1e-12)
    np.testing.assert_allclose(paddle.dataset.uci_housing.predict_reader()[0], test[0][0])
    assert len(paddle.dataset.uci_housing.feature_names) == 13
    _tar(home / "uci_housing" / "fit_a_line.fluid.tar", {"fit_a_line.fluid/__model__": b"m"})
    model_dir = paddle.dataset.uci_housing.fluid_model()
    assert (Path(model_dir) / "fit_a_line.fluid" / "__model__").read_bytes() == b"m"
    _tar(home / "uci_housing" / "fit_a_line.fluid.tar", {"../outside": b"x"})
    with pytest.raises(DatasetFileError, match="fit_a_line.fluid.tar: the model archive"):
        paddle.dataset.uci_housing.fluid_model()
    (home / "uci_housing" / "housing.data").write_text("1 2 3\n")
    with pytest.raises(DatasetFileError, match="housing.data: 3 numbers"):
        paddle.dataset.uci_housing.train()


# -- imdb ----------------------------------------------------------------------------------------

def test_imdb_aclimdb_tar_gz(home):
    docs = {"aclImdb/train/pos/0_9.txt": b"Good, good film!\n",
            "aclImdb/train/neg/1_2.txt": b"Bad film. bad.",
            "aclImdb/test/pos/2_8.txt": b"good",
            "aclImdb/test/neg/3_1.txt": b"awful film",
            "aclImdb/README": b"good good good"}
    _tar(home / "imdb" / "aclImdb_v1.tar.gz", docs)
    imdb = paddle.dataset.imdb
    import re
    d = imdb.build_dict(re.compile(r"aclImdb/((train)|(test))/((pos)|(neg))/.*\.txt$"), 0)
    # good and film are seen 3 times (ties ordered by the word), bad twice; README is no review
    assert d == {b"film": 0, b"good": 1, b"bad": 2, b"awful": 3, "<unk>": 4}
    train = list(imdb.train(d)())
    assert train == [([1, 1, 0], 0), ([2, 0, 2], 1)]
    assert list(imdb.test(d)()) == [([1], 0), ([3, 0], 1)]
    assert imdb.word_dict() == {"<unk>": 0}  # nothing is seen more than 150 times


# -- imikolov ------------------------------------------------------------------------------------

def test_imikolov_ptb_tgz(home):
    _tar(home / "imikolov" / "simple-examples.tgz", {
        "./simple-examples/data/ptb.train.txt": b" a b c \n a b <unk>\n",
        "./simple-examples/data/ptb.valid.txt": b" b c\n"})
    im = paddle.dataset.imikolov
    d = im.build_dict(min_word_freq=1)
    # counts: <s>=<e>=3, b=3, a=2, c=2; ties ordered by the word's bytes
    assert d == {"<e>": 0, "<s>": 1, b"b": 2, b"a": 3, b"c": 4, "<unk>": 5}
    grams = list(im.train(d, 3)())
    assert grams[:2] == [(1, 3, 2), (3, 2, 4)] and len(grams) == 6
    assert list(im.test(d, 0, im.DataType.SEQ)()) == [([1, 2, 4], [2, 4, 0])]
    assert list(im.test(d, 2, im.DataType.SEQ)()) == []


# -- movielens -----------------------------------------------------------------------------------

def test_movielens_ml1m_zip(home):
    _zip(home / "movielens" / "ml-1m.zip", {
        "ml-1m/movies.dat": "1::Toy Story (1995)::Animation|Comedy\n"
                            "7::Sabrina (1995)::Comedy|Romance\n".encode("latin"),
        "ml-1m/users.dat": b"1::F::1::10::48067\n5::M::25::20::55455\n",
        "ml-1m/ratings.dat": b"1::1::5::978300760\n5::7::3::978302109\n1::7::4::978301968\n"})
    ml = paddle.dataset.movielens
    assert (ml.max_user_id(), ml.max_movie_id(), ml.max_job_id()) == (5, 7, 20)
    assert ml.movie_categories() == {"Animation": 0, "Comedy": 1, "Romance": 2}
    assert ml.get_movie_title_dict() == {"toy": 0, "story": 1, "sabrina": 2}
    assert ml.user_info()[5].value() == [5, 0, 2, 20]
    assert ml.movie_info()[1].value() == [1, [0, 1], [0, 1]]
    everything = list(ml.train(test_ratio=0.0)())
    assert everything[0] == [1, 1, 0, 10, 1, [0, 1], [0, 1], [5.0]]
    assert everything[1][-1] == [1.0] and len(everything) == 3
    # the split draws np.random after seeding with rand_seed, as Paddle's does
    rng = np.random.RandomState(0)
    is_test = [rng.random_sample() < 0.5 for _ in range(3)]
    assert len(list(ml.test(test_ratio=0.5)())) == sum(is_test)
    assert len(list(ml.train(test_ratio=0.5)())) == 3 - sum(is_test)


# -- conll05 -------------------------------------------------------------------------------------

def test_conll05_tgz_and_dictionaries(home):
    folder = home / "conll05st"
    folder.mkdir()
    (folder / "conll05st%2FwordDict.txt").write_text("<unk>\nthe\ncat\nsat\nbos\neos\n")
    (folder / "conll05st%2FverbDict.txt").write_text("sit\nrun\n")
    (folder / "conll05st%2FtargetDict.txt").write_text("B-A0\nI-A0\nB-V\nI-V\nO\n")
    (folder / "conll05st%2Femb").write_bytes(b"\0" * 16)
    words = b"The\ncat\nsat\n\n"
    props = b"-  (A0*\n-  *)\nsit  (V*)\n\n"
    _tar(folder / "conll05st-tests.tar.gz", {
        "conll05st-release/test.wsj/words/test.wsj.words.gz": gzip.compress(words),
        "conll05st-release/test.wsj/props/test.wsj.props.gz": gzip.compress(props)})
    word_dict, verb_dict, label_dict = paddle.dataset.conll05.get_dict()
    assert label_dict == {"B-A0": 0, "I-A0": 1, "B-V": 2, "I-V": 3, "O": 4}
    assert verb_dict == {"sit": 0, "run": 1}
    assert paddle.dataset.conll05.get_embedding() == str(folder / "conll05st%2Femb")
    samples = list(paddle.dataset.conll05.test()())
    assert len(samples) == 1
    word, n2, n1, c0, p1, p2, pred, mark, label = samples[0]
    assert word == [0, 2, 3]  # "The" is not in the dictionary (case kept)
    assert (n2, n1, c0, p1, p2) == ([0] * 3, [2] * 3, [3] * 3, [5] * 3, [5] * 3)
    assert pred == [0, 0, 0] and mark == [1, 1, 1] and label == [0, 1, 2]


# -- wmt14 / wmt16 -------------------------------------------------------------------------------

def test_wmt14_tgz(home):
    _tar(home / "wmt14" / "wmt14.tgz", {
        "wmt14/src.dict": b"<s>\n<e>\n<unk>\nle\nchat\n",
        "wmt14/trg.dict": b"<s>\n<e>\n<unk>\nthe\ncat\n",
        "wmt14/train/train": b"le chat\tthe cat\nle\tthe dog\nbroken line\n",
        "wmt14/test/test": b"chat\tcat\n"})
    w = paddle.dataset.wmt14
    assert list(w.train(5)()) == [([0, 3, 4, 1], [0, 3, 4], [3, 4, 1]),
                                  ([0, 3, 1], [0, 3, 2], [3, 2, 1])]
    assert list(w.test(4)()) == [([0, 2, 1], [0, 2], [2, 1])]  # dict_size 4 drops "chat"
    src, trg = w.get_dict(5)
    assert src[3] == "le" and trg[4] == "cat"
    assert w.get_dict(5, reverse=False)[1]["cat"] == 4


def test_wmt16_tar_gz_builds_its_dictionaries(home):
    _tar(home / "wmt16" / "wmt16.tar.gz", {
        "wmt16/train": b"a cat\teine Katze\na dog\tein Hund\na\tein\n",
        "wmt16/test": b"a cat\tein Katze\n",
        "wmt16/val": b"dog\tHund\n"})
    w = paddle.dataset.wmt16
    with pytest.raises(DatasetFileError, match="call paddle.dataset.wmt16.train"):
        w.get_dict("en", 5)
    train = list(w.train(5, 6)())
    # en: <s> <e> <unk> a cat (dict_size 5); de: <s> <e> <unk> ein eine Katze
    assert w.get_dict("en", 5) == {"<s>": 0, "<e>": 1, "<unk>": 2, "a": 3, "cat": 4}
    assert w.get_dict("de", 6, reverse=True)[3] == "ein"
    assert train[0] == ([0, 3, 4, 1], [0, 4, 5], [4, 5, 1])
    assert list(w.validation(5, 6)()) == [([0, 2, 1], [0, 2], [2, 1])]
    assert list(w.test(6, 5, src_lang="de")())  # the other direction reads too
    with pytest.raises(graphc.GraphcError, match="only 'en'"):
        w.train(5, 5, src_lang="fr")


# -- flowers -------------------------------------------------------------------------------------

def test_flowers_tgz_and_mat(home):
    from PIL import Image
    from scipy import io as scio
    folder = home / "flowers"
    folder.mkdir()
    images = {}
    for i in (1, 2, 3):
        buf = io.BytesIO()
        Image.fromarray(np.full((40, 30, 3), 40 * i, np.uint8)).save(buf, format="JPEG")
        images[f"jpg/image_{i:05d}.jpg"] = buf.getvalue()
    _tar(folder / "102flowers.tgz", images)
    scio.savemat(folder / "imagelabels.mat", {"labels": np.array([[5, 7, 9]])})
    scio.savemat(folder / "setid.mat", {"trnid": np.array([[2]]), "tstid": np.array([[1, 3]]),
                                        "valid": np.array([[3]])})
    fl = paddle.dataset.flowers
    test = list(fl.test()())
    assert [label for _, label in test] == [6]
    assert test[0][0].shape == (3 * 224 * 224,) and test[0][0].dtype == np.float32
    # a flat grey JPEG: every pixel of channel c is ~80 minus Paddle's BGR mean
    chw = test[0][0].reshape(3, 224, 224)
    np.testing.assert_allclose(chw.mean(axis=(1, 2)), 80 - np.array([103.94, 116.78, 123.68]),
                               atol=3)
    assert [label for _, label in fl.train()()] == [4, 8]
    raw = list(fl.valid(mapper=lambda s: s)())
    assert raw == [(images["jpg/image_00003.jpg"], 8)]
    (folder / "setid.mat").write_bytes(b"MATLAB? no")
    with pytest.raises(DatasetFileError, match="setid.mat: the MATLAB file"):
        fl.train()


# -- sentiment -----------------------------------------------------------------------------------

def test_sentiment_nltk_movie_reviews_zip(home):
    _zip(home / "corpora" / "movie_reviews.zip", {
        "movie_reviews/README": b"ignored",
        "movie_reviews/neg/cv000_1.txt": b"bad , bad movie .\n",
        "movie_reviews/neg/cv001_2.txt": b"dull movie\n",
        "movie_reviews/pos/cv000_3.txt": b"great movie !\n",
        "movie_reviews/pos/cv001_4.txt": b"it's great\n"})
    s = paddle.dataset.sentiment
    words = dict(s.get_word_dict())
    assert words["movie"] == 0 and {"bad", "great", ",", "'", "it", "s"} <= set(words)
    data = list(s.test())  # all 4 are past the 1600 training instances? no: the first 1600
    assert data == []
    train = list(s.train())
    assert [label for _, label in train] == [0, 1, 0, 1]
    assert train[0][0] == [words["bad"], words[","], words["bad"], words["movie"], words["."]]


def test_sentiment_absent_corpus_says_where(home):
    with pytest.raises(DatasetFileError, match="corpora/movie_reviews.zip nor .*movie_reviews "
                                               "is there"):
        list(paddle.dataset.sentiment.train())


# -- the refused ones stay refused ---------------------------------------------------------------

def test_datasets_graphc_does_not_read_keep_their_advice():
    from graphc.fluid._missing import MissingModuleError
    with pytest.raises(MissingModuleError, match="voc2012"):
        importlib.import_module("graphc.dataset.voc2012")


@pytest.mark.parametrize("path,read", [
    ("imdb/aclImdb_v1.tar.gz", lambda: paddle.dataset.imdb.word_dict()),
    ("imikolov/simple-examples.tgz", lambda: paddle.dataset.imikolov.build_dict()),
    ("movielens/ml-1m.zip", lambda: paddle.dataset.movielens.max_user_id()),
    ("wmt14/wmt14.tgz", lambda: list(paddle.dataset.wmt14.train(10)())),
    ("wmt16/wmt16.tar.gz", lambda: list(paddle.dataset.wmt16.train(10, 10)())),
    ("corpora/movie_reviews.zip", lambda: list(paddle.dataset.sentiment.train())),
])
def test_a_wrong_format_file_is_an_error_naming_it(home, path, read):
    target = home / path
    target.parent.mkdir(parents=True)
    target.write_bytes(b"this is not an archive\n" * 4)
    with pytest.raises(DatasetFileError, match=rf"{target}: the .* is not in the expected "
                                               "format"):
        read()
