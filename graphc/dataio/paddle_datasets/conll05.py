"""``paddle.dataset.conll05``: the CoNLL-2005 test set (``conll05st-tests.tar.gz``) and its
word/verb/label dictionaries and embedding in ``DATA_HOME/conll05st``, as SRL samples."""

from __future__ import annotations

import gzip

from . import common

__all__ = ["test", "get_dict", "get_embedding", "fetch", "convert"]

DATA_URL = "http://paddlemodels.bj.bcebos.com/conll05st/conll05st-tests.tar.gz"
DATA_MD5 = "387719152ae52d60422c016e92a742fc"
WORDDICT_URL = "http://paddlemodels.bj.bcebos.com/conll05st%2FwordDict.txt"
WORDDICT_MD5 = "ea7fb7d4c75cc6254716f0177a506baa"
VERBDICT_URL = "http://paddlemodels.bj.bcebos.com/conll05st%2FverbDict.txt"
VERBDICT_MD5 = "0d2977293bbb6cbefab5b0f97db1e77c"
TRGDICT_URL = "http://paddlemodels.bj.bcebos.com/conll05st%2FtargetDict.txt"
TRGDICT_MD5 = "d8c7f03ceb5fc2e5a0fa7503a4353751"
EMB_URL = "http://paddlemodels.bj.bcebos.com/conll05st%2Femb"
EMB_MD5 = "bf436eb0faa1f6f9103017f8be57cdb7"

UNK_IDX = 0


def _read_lines(filename):
    with common.reading(filename, "the dictionary"), open(filename, encoding="utf-8") as f:
        return f.read().splitlines()


def load_label_dict(filename):
    """``B-x``/``I-x`` ids for each tag ``x`` (in first-seen order) and ``O`` last."""
    tags = {}
    for line in _read_lines(filename):
        line = line.strip()
        if line.startswith(("B-", "I-")):
            tags.setdefault(line[2:], None)
    d = {}
    for tag in tags:
        d["B-" + tag] = len(d)
        d["I-" + tag] = len(d)
    d["O"] = len(d)
    return d


def load_dict(filename):
    """Line ``i`` (stripped) -> ``i``."""
    return {line.strip(): i for i, line in enumerate(_read_lines(filename))}


def _bracket_labels(lbl, where):
    cur_tag, in_bracket, seq = "O", False, []
    for tok in lbl:
        if tok == "*":
            seq.append("I-" + cur_tag if in_bracket else "O")
        elif tok == "*)":
            seq.append("I-" + cur_tag)
            in_bracket = False
        elif "(" in tok:
            cur_tag = tok[1:tok.find("*")]
            seq.append("B-" + cur_tag)
            in_bracket = ")" not in tok
        else:
            raise common.DatasetFileError(f"{where}: unexpected label {tok!r}")
    return seq


def corpus_reader(data_path, words_name, props_name):
    """(sentence words, predicate, B-/I-/O labels) for each predicate of each sentence."""
    def reader():
        where = f"{data_path}:{props_name}"
        with common.open_tar(data_path) as tf, common.reading(data_path, "the CoNLL archive"):
            wf = common.tar_member(tf, words_name, data_path)
            pf = common.tar_member(tf, props_name, data_path)
            with gzip.GzipFile(fileobj=wf) as words_file, \
                    gzip.GzipFile(fileobj=pf) as props_file:
                sentences, one_seg = [], []
                for word, label in zip(words_file, props_file):
                    word = word.strip().decode("utf-8")
                    label = label.decode("utf-8").strip().split()
                    if label:
                        sentences.append(word)
                        one_seg.append(label)
                        continue
                    if one_seg:  # end of a sentence: one column per predicate
                        columns = [[row[i] for row in one_seg] for i in range(len(one_seg[0]))]
                        verbs = [x for x in columns[0] if x != "-"]
                        for i, lbl in enumerate(columns[1:]):
                            if i >= len(verbs):
                                raise common.DatasetFileError(
                                    f"{where}: more argument columns than predicates")
                            yield sentences, verbs[i], _bracket_labels(lbl, where)
                    sentences, one_seg = [], []
    return reader


def reader_creator(corpus_reader, word_dict=None, predicate_dict=None, label_dict=None):
    """Paddle's nine SRL slots: words, the five context words around the verb (each repeated
    over the sentence), the predicate, the context mark, the label ids."""
    def reader():
        for sentence, predicate, labels in corpus_reader():
            sen_len = len(sentence)
            if "B-V" not in labels:
                raise common.DatasetFileError(f"conll05: a sentence without a B-V label "
                                              f"({' '.join(sentence[:8])} ...)")
            verb_index = labels.index("B-V")
            mark = [0] * len(labels)
            ctx = {}
            for offset, name in ((-2, "n2"), (-1, "n1"), (0, "0"), (1, "p1"), (2, "p2")):
                j = verb_index + offset
                if 0 <= j < len(labels):
                    mark[j] = 1
                    ctx[name] = sentence[j]
                else:
                    ctx[name] = "bos" if offset < 0 else "eos"
            word_idx = [word_dict.get(w, UNK_IDX) for w in sentence]
            ctx_ids = [[word_dict.get(ctx[k], UNK_IDX)] * sen_len
                       for k in ("n2", "n1", "0", "p1", "p2")]
            pred_idx = [predicate_dict.get(predicate)] * sen_len
            label_idx = [label_dict.get(w) for w in labels]
            yield (word_idx, *ctx_ids, pred_idx, mark, label_idx)
    return reader


def get_dict():
    """(word dict, verb dict, label dict) from the cached dictionary files."""
    word_dict = load_dict(common.download(WORDDICT_URL, "conll05st", WORDDICT_MD5))
    verb_dict = load_dict(common.download(VERBDICT_URL, "conll05st", VERBDICT_MD5))
    label_dict = load_label_dict(common.download(TRGDICT_URL, "conll05st", TRGDICT_MD5))
    return word_dict, verb_dict, label_dict


def get_embedding():
    """The path of the cached embedding file (``conll05st%2Femb``)."""
    return common.download(EMB_URL, "conll05st", EMB_MD5)


def test():
    word_dict, verb_dict, label_dict = get_dict()
    reader = corpus_reader(
        common.download(DATA_URL, "conll05st", DATA_MD5),
        words_name="conll05st-release/test.wsj/words/test.wsj.words.gz",
        props_name="conll05st-release/test.wsj/props/test.wsj.props.gz")
    return reader_creator(reader, word_dict, verb_dict, label_dict)


def fetch():
    common.download(WORDDICT_URL, "conll05st", WORDDICT_MD5)
    common.download(VERBDICT_URL, "conll05st", VERBDICT_MD5)
    common.download(TRGDICT_URL, "conll05st", TRGDICT_MD5)
    common.download(EMB_URL, "conll05st", EMB_MD5)
    common.download(DATA_URL, "conll05st", DATA_MD5)


def convert(path):
    common.convert(path, test(), 1000, "conl105_test")
