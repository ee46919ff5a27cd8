"""Paddle's book chapters 05-08 (recommender_system, understand_sentiment,
label_semantic_roles, machine_translation), which feed LoD sequences, as graphc's own
Fluid-1.8-spelled programs (tests/book_programs/), ported by the rule alone and run on small
synthetic datasets of the right shapes: each trains (the loss falls) and, where the chapter
does, saves an inference model, loads it and infers on LoD input."""

from __future__ import annotations

import os
import random
import types

import numpy as np
import pytest
from porting import run_book_program

import graphc
import graphc.fluid as fluid

BOOK_SEED = int(os.environ.get("GRAPHC_BOOK_SEED", "1"))


@pytest.fixture
def fresh_scope():
    """Each chapter in its own Scope; the programs' and readers' seeds fixed so that a run
    is reproducible (GRAPHC_BOOK_SEED picks another)."""
    random.seed(BOOK_SEED)
    np.random.seed(BOOK_SEED)
    graphc.default_main_program().random_seed = BOOK_SEED
    graphc.default_startup_program().random_seed = BOOK_SEED
    with graphc.scope_guard(graphc.Scope()):
        yield


def mean(values):
    return float(np.mean(values))


def report(what, values, name="loss"):
    """Visible with -s: the numbers these chapters reach."""
    print(f"{what}: {len(values)} steps, {name} {values[0]:.4f} -> {values[-1]:.4f}")


# -- 05 recommender_system -----------------------------------------------------------------
def synthetic_movielens(users=8, movies=20, categories=6, title_words=40, seed=5):
    """A stand-in for paddle.dataset.movielens with its API and sample layout: [user_id,
    gender_id, age_id, job_id, movie_id, category ids (1-3), title word ids (1-6), [score]].
    Each user likes one category: a movie of it scores 5, others 1."""
    rng = np.random.RandomState(seed)
    likes = rng.randint(categories, size=users + 1)
    user_info = {u: (rng.randint(2), rng.randint(7), rng.randint(21))
                 for u in range(1, users + 1)}
    movie_cats = {m: list(rng.choice(categories, rng.randint(1, 4), replace=False))
                  for m in range(1, movies + 1)}
    movie_title = {m: list(rng.randint(title_words, size=rng.randint(1, 7)))
                   for m in range(1, movies + 1)}

    def reader(samples, offset):
        def read():
            r = np.random.RandomState(seed + offset)
            for _ in range(samples):
                u, m = r.randint(1, users + 1), r.randint(1, movies + 1)
                score = 5.0 if likes[u] in movie_cats[m] else 1.0
                yield [u, *user_info[u], m, movie_cats[m], movie_title[m], [score]]
        return read

    return types.SimpleNamespace(
        max_user_id=lambda: users, max_movie_id=lambda: movies, max_job_id=lambda: 20,
        age_table=[1, 18, 25, 35, 45, 50, 56],
        movie_categories=lambda: {f"c{i}": i for i in range(categories)},
        get_movie_title_dict=lambda: {f"t{i}": i for i in range(title_words)},
        train=lambda: reader(256, 1), test=lambda: reader(64, 2))


def test_recommender_system_trains_saves_and_infers(tmp_path, fresh_scope):
    movielens = synthetic_movielens()
    book = run_book_program("recommender_system",
                            data={"paddle.dataset.movielens": "synthetic_movielens"},
                            inject={"synthetic_movielens": movielens})
    save_dir = str(tmp_path / "recommender_system.inference.model")
    losses, test_losses = book["train"](use_cuda=False, save_dirname=save_dir)
    report("recommender_system", losses)
    report("recommender_system test loss per pass", test_losses, name="test loss")
    # 256 ratings in batches of 16: 16 steps a pass, four passes
    assert len(losses) == 64 and all(np.isfinite(losses))
    assert mean(losses[-6:]) < mean(losses[:6]) * 0.6, losses
    assert test_losses[-1] < test_losses[0] * 0.8, test_losses
    samples = list(movielens.test()())[:6]
    for sample in samples:
        names, got = book["infer"](use_cuda=False, save_dirname=save_dir,
                                   sample=sample[:-1])
        assert names == ["user_id", "gender_id", "age_id", "job_id", "movie_id",
                         "category_id", "movie_title"]
        assert got.shape == (1, 1) and np.isfinite(got).all()
        assert abs(float(got[0, 0])) <= 5.0 + 1e-4
    # the loaded model scores liked movies above the others, as it was trained to
    scores = [(float(book["infer"](use_cuda=False, save_dirname=save_dir,
                                   sample=s[:-1])[1][0, 0]), s[-1][0])
              for s in list(movielens.test()())[:24]]
    liked = [p for p, s in scores if s == 5.0]
    other = [p for p, s in scores if s == 1.0]
    assert liked and other and mean(liked) > mean(other), scores


# -- 06 understand_sentiment ---------------------------------------------------------------
SENTIMENT_VOCAB = 60


def synthetic_imdb(samples_train=192, samples_test=48, seed=6):
    """A stand-in for paddle.dataset.imdb: word_dict() and readers of (word ids, label)
    reviews of 1-12 words. Words 0-9 are positive, 10-19 negative, the rest neutral; the
    label is 1 where positive words outnumber negative ones."""
    def reader(samples, offset):
        def read():
            rng = np.random.RandomState(seed + offset)
            for _ in range(samples):
                label = rng.randint(2)
                length = rng.randint(1, 13)
                words = list(rng.randint(20, SENTIMENT_VOCAB, size=length))
                polar = rng.randint(0, 10, size=1 + length // 3) + (0 if label else 10)
                for k, w in enumerate(polar):
                    words[(k * 3) % length] = int(w)
                yield words, label
        return read

    return types.SimpleNamespace(
        word_dict=lambda: {f"w{i}": i for i in range(SENTIMENT_VOCAB)},
        train=lambda word_dict: reader(samples_train, 1),
        test=lambda word_dict: reader(samples_test, 2))


@pytest.mark.parametrize("net", ["convolution_net", "stacked_lstm_net"])
def test_understand_sentiment_trains_saves_and_infers(net, tmp_path, fresh_scope):
    imdb = synthetic_imdb()
    book = run_book_program("understand_sentiment",
                            data={"paddle.dataset.imdb": "synthetic_imdb"},
                            inject={"synthetic_imdb": imdb})
    save_dir = str(tmp_path / f"understand_sentiment_{net}.inference.model")
    word_dict = imdb.word_dict()
    losses, accs = book["train"](word_dict, book[net], use_cuda=False, save_dirname=save_dir)
    report(f"understand_sentiment {net}", losses)
    # 192 reviews in batches of 16: 12 steps a pass, three passes
    assert len(losses) == 36 and all(np.isfinite(losses))
    assert mean(losses[-6:]) < mean(losses[:6]) * 0.7, losses
    assert mean(accs[-6:]) > 0.8, accs
    names, probs = book["infer"](word_dict, use_cuda=False, save_dirname=save_dir)
    assert names == ["words"] and probs.shape == (3, 2)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    # held-out reviews, fed as one LoD batch, are classified as trained
    reviews = list(imdb.test(word_dict)())
    tensor = fluid.create_lod_tensor([w for w, _ in reviews], [[len(w) for w, _ in reviews]],
                                     fluid.CPUPlace())
    _, probs = book["infer"](word_dict, use_cuda=False, save_dirname=save_dir, tensor=tensor)
    assert probs.shape == (len(reviews), 2)
    assert np.mean(probs.argmax(axis=1) == [lab for _, lab in reviews]) > 0.8


# -- 07 label_semantic_roles ---------------------------------------------------------------
SRL_VOCAB, SRL_VERBS, SRL_WORD_DIM = 40, 10, 8
SRL_LR = float(os.environ.get("SRL_LR", "0.05"))
SRL_LABELS = ["B-A0", "I-A0", "B-A1", "I-A1", "B-A2", "I-A2", "O"]


def srl_sentence(rng):
    """One conll05-shaped sample: nine per-token lists (word, ctx_n2..ctx_p2, predicate,
    mark, label ids). Word w > 0 belongs to argument type (w - 1) % 4, type 3 being O; a run
    of one type is one chunk (B- then I- tags, IOB). Id 0 pads the context at the edges."""
    length = rng.randint(1, 11)
    words = list(rng.randint(1, SRL_VOCAB, size=length))
    p = rng.randint(length)
    ctx = [words[i] if 0 <= i < length else 0 for i in range(p - 2, p + 3)]
    mark = [int(abs(i - p) <= 2) for i in range(length)]
    labels, previous = [], None
    for w in words:
        kind = (w - 1) % 4
        if kind == 3:
            labels.append(6)
        else:
            labels.append(2 * kind + (kind == previous))
        previous = kind
    verb = int(rng.randint(SRL_VERBS))
    return (words, *[[c] * length for c in ctx], [verb] * length, mark, labels)


def synthetic_conll05(root, samples=192, seed=7):
    """A stand-in for paddle.dataset.conll05: get_dict(), get_embedding() (a pretrained
    table file in conll05's layout: a 16-byte header, then float32 rows) and test()."""
    rng = np.random.RandomState(seed)
    path = root / "emb"
    with open(path, "wb") as f:
        f.write(b"\0" * 16)
        # pretrained rows say something of a word: its type in the first four coordinates
        table = rng.normal(0, 0.3, (SRL_VOCAB, SRL_WORD_DIM))
        table[np.arange(1, SRL_VOCAB), (np.arange(1, SRL_VOCAB) - 1) % 4] += 2.0
        table.astype("float32").tofile(f)

    def reader(n, offset):
        def read():
            r = np.random.RandomState(seed + offset)
            for _ in range(n):
                yield srl_sentence(r)
        return read

    return types.SimpleNamespace(
        get_dict=lambda: ({f"w{i}": i for i in range(SRL_VOCAB)},
                          {f"v{i}": i for i in range(SRL_VERBS)},
                          {tag: i for i, tag in enumerate(SRL_LABELS)}),
        get_embedding=lambda: str(path), test=lambda: reader(samples, 1),
        held_out=reader(32, 2))


def viterbi(emissions, transition):
    """The best tag path of one sequence under graphc's (and Paddle's) CRF layout: row 0
    start weights, row 1 end weights, rows 2.. tag-to-tag weights."""
    start, end, trans = transition[0], transition[1], transition[2:]
    score, back = start + emissions[0], []
    for row in emissions[1:]:
        total = score[:, None] + trans
        back.append(total.argmax(axis=0))
        score = total.max(axis=0) + row
    path = [int((score + end).argmax())]
    for pointers in reversed(back):
        path.append(int(pointers[path[-1]]))
    return path[::-1]


@pytest.mark.slow  # ~30 s compiling on a busy 2-core machine: four LSTMs fwd+bwd per bucket
def test_label_semantic_roles_trains_saves_and_infers(tmp_path, fresh_scope):
    conll05 = synthetic_conll05(tmp_path)
    book = run_book_program(
        "label_semantic_roles",
        data={"import paddle.dataset.conll05 as conll05": "conll05 = synthetic_conll05",
              "paddle.dataset.conll05.test()": "synthetic_conll05.test()"},
        inject={"synthetic_conll05": conll05})
    save_dir = str(tmp_path / "label_semantic_roles.inference.model")
    losses, f1s = book["train"](use_cuda=False, save_dirname=save_dir, learning_rate=SRL_LR)
    report("label_semantic_roles", losses)
    report("label_semantic_roles", f1s, name="chunk F1")
    # 192 sentences in batches of 16: 12 steps a pass, four passes
    assert len(losses) == 48 and all(np.isfinite(losses))
    assert mean(losses[-6:]) < mean(losses[:6]) * 0.5, losses
    assert mean(f1s[-6:]) > mean(f1s[:6]) + 0.2, f1s
    scope = graphc.global_scope()
    # the six word embeddings are one frozen table: the pretrained one, untouched
    params = [p.name for p in graphc.default_main_program().global_block().all_parameters()]
    assert params.count("emb") == 1 and params.count("crfw") == 1
    with open(conll05.get_embedding(), "rb") as f:
        f.read(16)
        pretrained = np.fromfile(f, dtype=np.float32).reshape(SRL_VOCAB, SRL_WORD_DIM)
    np.testing.assert_array_equal(np.asarray(scope["emb"]), pretrained)

    names, out = book["infer"](use_cuda=False, save_dirname=save_dir)
    assert out.recursive_sequence_lengths() == [[3, 4, 2]]
    assert np.array(out).shape == (9, len(SRL_LABELS))
    # held-out sentences as one LoD batch: Viterbi over the loaded model's emissions and
    # the trained transitions tags them as labelled
    sentences = list(conll05.held_out())
    lens = [[len(s[0]) for s in sentences]]
    feed = {name: fluid.create_lod_tensor([s[k] for s in sentences], lens, fluid.CPUPlace())
            for k, name in zip([0, 6, 1, 2, 3, 4, 5, 7], names)}
    _, out = book["infer"](use_cuda=False, save_dirname=save_dir, feed=feed)
    assert out.recursive_sequence_lengths() == lens
    emissions, transition = np.array(out), np.asarray(scope["crfw"])
    offsets = np.cumsum([0] + lens[0])
    tagged = [viterbi(emissions[a:b], transition) for a, b in zip(offsets, offsets[1:])]
    hits = np.concatenate([np.equal(t, s[8]) for t, s in zip(tagged, sentences)])
    assert hits.mean() > 0.8, hits.mean()


# -- 08 machine_translation (training; its beam-search decoder: test_lod_beam_search.py) -----
def synthetic_wmt14(samples=192, seed=8):
    """A stand-in for paddle.dataset.wmt14: train(dict_size) reads (source ids, target ids
    after <s>, target ids then <e>). A source is a run of 1-8 consecutive word ids; its
    translation maps each word w to (w + 7) in ids 2.. (0 is <s>, 1 <e>)."""
    def train(dict_size):
        def read():
            rng = np.random.RandomState(seed)
            words = dict_size - 2
            for _ in range(samples):
                start, length = rng.randint(words), rng.randint(1, 9)
                src = [2 + (start + k) % words for k in range(length)]
                trg = [2 + (w - 2 + 7) % words for w in src]
                yield src, [0] + trg, trg + [1]
        return read
    return types.SimpleNamespace(train=train)


@pytest.mark.parametrize("encoder", ["lstm", "gru", "attention"])
def test_machine_translation_trains(encoder, fresh_scope):
    book = run_book_program("machine_translation",
                            data={"paddle.dataset.wmt14": "synthetic_wmt14"},
                            inject={"synthetic_wmt14": synthetic_wmt14()})
    losses = book["train_main"](use_cuda=False, is_sparse=True, encoder=encoder)
    report(f"machine_translation ({encoder})", losses)
    # 192 pairs in batches of 16: 12 steps a pass, three passes
    assert len(losses) == 36 and all(np.isfinite(losses))
    assert mean(losses[-6:]) < mean(losses[:6]) * 0.6, losses
    # the encoder and decoder embeddings are one table, named twice
    params = [p.name for p in graphc.default_main_program().global_block().all_parameters()]
    assert params.count("vemb") == 1
