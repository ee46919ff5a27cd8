"""Paddle's book chapters 01-04 (fit_a_line, recognize_digits, image_classification, word2vec)
as graphc's own Fluid-1.8-spelled programs (tests/book_programs/), ported by the rule alone
and run on small synthetic data: each trains (the loss falls) and, where the chapter does,
saves an inference model, loads it and infers what the trained program computes."""

from __future__ import annotations

import ast
import gzip
import os
import random

import numpy as np
import pytest
from porting import run_book_program

import graphc

BOOK_SEED = int(os.environ.get("GRAPHC_BOOK_SEED", "1"))


@pytest.fixture
def fresh_scope():
    """Paddle's book tests run each chapter in its own Scope and Programs. The chapters set
    no seed; the test fixes the programs' random_seed and the shuffling readers' so that a
    run is reproducible (GRAPHC_BOOK_SEED picks another)."""
    random.seed(BOOK_SEED)
    np.random.seed(BOOK_SEED)
    graphc.default_main_program().random_seed = BOOK_SEED
    graphc.default_startup_program().random_seed = BOOK_SEED
    with graphc.scope_guard(graphc.Scope()):
        yield


# -- fake Paddle dataset caches: graphc.dataset reads them as Paddle would ---------------------
@pytest.fixture
def paddle_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GRAPHC_DATASET_CHECK_MD5", "0")  # synthetic files, not Paddle's
    root = tmp_path / ".cache" / "paddle" / "dataset"
    return root


def write_uci_housing(root, rows=120, seed=0):
    """housing.data: 13 features and a price that is linear in them, plus a little noise."""
    rng = np.random.RandomState(seed)
    features = rng.uniform(0, 10, (rows, 13))
    weights = rng.uniform(-1, 1, 13)
    price = features @ weights + 20 + rng.normal(0, 0.1, rows)
    (root / "uci_housing").mkdir(parents=True)
    np.savetxt(root / "uci_housing" / "housing.data", np.column_stack([features, price]),
               fmt="%.6f")


def write_mnist(root, train=256, test=64, seed=0):
    """IDX files of 28x28 digits: class k is a bright bar at row band k, on noise."""
    rng = np.random.RandomState(seed)
    (root / "mnist").mkdir(parents=True)
    for prefix, n in (("train", train), ("t10k", test)):
        labels = rng.randint(0, 10, n).astype(np.uint8)
        images = rng.randint(0, 80, (n, 28, 28)).astype(np.uint8)
        for i, k in enumerate(labels):
            images[i, 2 + 2 * k:4 + 2 * k, 4:24] = 255
        with gzip.open(root / "mnist" / f"{prefix}-images-idx3-ubyte.gz", "wb") as f:
            f.write(np.array([2051, n, 28, 28], ">i4").tobytes() + images.tobytes())
        with gzip.open(root / "mnist" / f"{prefix}-labels-idx1-ubyte.gz", "wb") as f:
            f.write(np.array([2049, n], ">i4").tobytes() + labels.tobytes())


def mean(values):
    return float(np.mean(values))


def report(what, losses):
    """Visible with -s: the numbers these chapters reach."""
    print(f"{what}: {len(losses)} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}")


# -- 01 fit_a_line ---------------------------------------------------------------------------
def test_fit_a_line_trains_saves_and_infers(paddle_cache, tmp_path, fresh_scope):
    write_uci_housing(paddle_cache)
    book = run_book_program("fit_a_line")
    save_dir = str(tmp_path / "fit_a_line.inference.model")
    losses = book["train"](use_cuda=False, save_dirname=save_dir)
    report("fit_a_line", losses)
    assert all(np.isfinite(losses))
    # 96 training rows in batches of 20: 5 steps a pass
    assert mean(losses[-5:]) < mean(losses[:5]) * 0.2, losses
    names, feat, label, predicted = book["infer"](use_cuda=False, save_dirname=save_dir)
    assert names == ["x"] and predicted.shape == (10, 1)
    # the trained regression fits the held-out prices (which range over several units)
    assert mean((predicted - label) ** 2) < 0.3 * mean((label - label.mean()) ** 2), (
        predicted.ravel(), label.ravel())


def test_fit_a_line_as_the_book_repository_writes_it(paddle_cache, tmp_path, fresh_scope):
    """fluid.data([None, 13]), a train_test loop on a cloned test program, inference."""
    write_uci_housing(paddle_cache)
    book = run_book_program("fit_a_line_book")
    train_losses, test_losses, label, predicted = book["main"](
        params_dirname=str(tmp_path / "fit_a_line.inference.model"))
    report("fit_a_line (book repository)", train_losses)
    report("fit_a_line (book repository) test loss per epoch", test_losses)
    assert mean(train_losses[-5:]) < mean(train_losses[:5]) * 0.2, train_losses
    assert test_losses[-1] < test_losses[0] * 0.2, test_losses
    assert predicted.shape == (10, 1)
    assert mean((predicted - label) ** 2) < 0.3 * mean((label - label.mean()) ** 2)


def test_book_programs_are_written_for_paddle():
    """The programs speak Paddle only: the porting rule is the one change the tests make."""
    from porting import BOOK_PROGRAMS
    programs = sorted(BOOK_PROGRAMS.glob("*.py"))
    assert len(programs) >= 6
    for path in programs:
        source = path.read_text()
        docstring = ast.get_docstring(ast.parse(source), clean=False)
        assert "graphc" not in source.replace(docstring, ""), path.name
        assert "import paddle.fluid as fluid" in source, path.name


# -- 02 recognize_digits -------------------------------------------------------------------
@pytest.mark.parametrize("nn_type,combined", [("softmax_regression", False), ("mlp", True),
                                              ("conv", False)])
def test_recognize_digits_trains_saves_and_infers(nn_type, combined, paddle_cache, tmp_path,
                                                  fresh_scope):
    """Paddle's test saves with separate files and with model_filename/params_filename."""
    write_mnist(paddle_cache)
    book = run_book_program("recognize_digits")
    save_dir = str(tmp_path / f"recognize_digits_{nn_type}.inference.model")
    files = dict(model_filename="__model_combined__" if combined else None,
                 params_filename="__params_combined__" if combined else None)
    full_dir = str(tmp_path / f"recognize_digits_{nn_type}.train.model")
    losses, test_acc = book["train"](nn_type, use_cuda=False, save_dirname=save_dir,
                                     save_full_dirname=full_dir, **files)
    report(f"recognize_digits {nn_type}", losses)
    # 256 images in batches of 32: 8 steps a pass, two passes
    assert len(losses) == 16
    assert mean(losses[-4:]) < mean(losses[:4]) * 0.5, losses
    assert test_acc > 0.6, test_acc
    import graphc.dataset as paddle_dataset
    probe = [sample for sample, _ in zip(paddle_dataset.mnist.test()(), range(32))]
    images = np.stack([s[0] for s in probe]).reshape(32, 1, 28, 28).astype("float32")
    got = book["infer"](use_cuda=False, save_dirname=save_dir, images=images, **files)
    assert got.shape == (32, 10)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-5)
    # the loaded model classifies as the trained one did on the test set
    assert np.mean(got.argmax(axis=1) == [s[1] for s in probe]) > 0.6
    # export_for_deployment=False kept the training program, optimizer ops and all, and
    # every persistable (Adam's moments too), as Paddle's __model__.main_program does
    model_name = files["model_filename"] or "__model__"
    with open(os.path.join(full_dir, model_name + ".main_program")) as f:
        full_program = graphc.parse(f.read()).to_program()
    assert "adam" in {op.type for op in full_program.global_block().ops}
    trained = graphc.global_scope()
    with graphc.scope_guard(graphc.Scope()):
        graphc.io.load_persistables(graphc.Executor(), full_dir, main_program=full_program,
                                    filename=files["params_filename"])
        restored = graphc.global_scope()
        names = [v.name for v in full_program.global_block().vars.values() if v.persistable]
        assert any("moment" in n for n in names), names
        for name in names:
            np.testing.assert_array_equal(np.asarray(restored[name]),
                                          np.asarray(trained[name]), err_msg=name)
    if combined:
        assert {"__model_combined__", "__params_combined__"} <= set(os.listdir(save_dir))


# -- 03 image_classification ---------------------------------------------------------------
def synthetic_cifar(size, samples, seed):
    """cifar-shaped samples (a flat float32 [3*size*size] in [0, 1] and a label in [0, 10)):
    class k brightens channel k % 3 in row band k // 3, on noise."""
    def reader():
        rng = np.random.RandomState(seed)
        for _ in range(samples):
            k = rng.randint(10)
            image = rng.uniform(0, 0.5, (3, size, size)).astype("float32")
            band = size // 4
            image[k % 3, (k // 3) * band:(k // 3 + 1) * band, :] += 1.0
            yield image.reshape(-1), k
    return reader


IMAGE_NETS = {
    "resnet": dict(image_size=8, net_args=dict(depth=8, base=4), learning_rate=0.01,
                   num_passes=3),
    "vgg": dict(image_size=16, learning_rate=0.01, num_passes=3,
                net_args=dict(widths=(4, 8), groups=(2, 1), fc_size=32)),
}


@pytest.mark.parametrize("net_type", sorted(IMAGE_NETS))
def test_image_classification_trains_saves_and_infers(net_type, tmp_path, fresh_scope):
    cfg = dict(IMAGE_NETS[net_type])
    size = cfg["image_size"]
    book = run_book_program(
        "image_classification",
        data={"paddle.dataset.cifar.train10()": f"synthetic_cifar({size}, 192, 1)",
              "paddle.dataset.cifar.test10()": f"synthetic_cifar({size}, 64, 2)"},
        inject={"synthetic_cifar": synthetic_cifar})
    save_dir = str(tmp_path / f"image_classification_{net_type}.inference.model")
    losses, test_acc, test_probs = book["train"](net_type, use_cuda=False,
                                                 save_dirname=save_dir, **cfg)
    report(f"image_classification {net_type}", losses)
    # 192 images in batches of 16: 12 steps a pass
    assert len(losses) == 12 * cfg["num_passes"]
    assert mean(losses[-6:]) < mean(losses[:6]) * 0.7, losses
    assert test_acc > 0.3, test_acc  # ten classes: chance is 0.1
    names, got = book["infer"](use_cuda=False, save_dirname=save_dir,
                               images=np.stack([s[0].reshape(3, size, size) for s in
                                                synthetic_cifar(size, 64, 2)()]))
    assert names == ["pixel"]
    # the loaded model is the trained test program (dropout off, batch norm's moving stats)
    np.testing.assert_allclose(got, test_probs, rtol=1e-4, atol=1e-5)


# -- 04 word2vec ---------------------------------------------------------------------------
VOCAB = 24


def synthetic_dict():
    return {f"w{i}": i for i in range(VOCAB)}


def synthetic_ngrams(word_dict, n, samples=256, seed=3):
    """imikolov-shaped n-grams (tuples of n ids): words count up, so the next word is the
    fourth plus one (modulo the vocabulary)."""
    def reader():
        rng = np.random.RandomState(seed)
        for _ in range(samples):
            start = rng.randint(len(word_dict))
            yield tuple((start + i) % len(word_dict) for i in range(n))
    return reader


@pytest.mark.parametrize("is_sparse", [False, True], ids=["dense", "sparse"])
def test_word2vec_with_a_shared_embedding_trains_saves_and_infers(is_sparse, tmp_path,
                                                                   fresh_scope):
    book = run_book_program(
        "word2vec",
        data={"paddle.dataset.imikolov.build_dict()": "synthetic_dict()",
              "paddle.dataset.imikolov.train(word_dict, N)": "synthetic_ngrams(word_dict, N)"},
        inject={"synthetic_dict": synthetic_dict, "synthetic_ngrams": synthetic_ngrams})
    save_dir = str(tmp_path / "word2vec.inference.model")
    losses = book["train"](use_cuda=False, is_sparse=is_sparse, save_dirname=save_dir)
    report(f"word2vec is_sparse={is_sparse}", losses)
    # 256 n-grams in batches of 32: 8 steps a pass, six passes
    assert len(losses) == 48
    assert mean(losses[-4:]) < mean(losses[:4]) * 0.7, losses
    # the four embeddings are one parameter
    params = [p.name for p in graphc.default_main_program().global_block().all_parameters()]
    assert params.count("shared_w") == 1 and not any("embedding" in p for p in params)
    words = np.array([[i, i + 1, i + 2, i + 3] for i in range(8)]).T
    names, probs = book["infer"](use_cuda=False, save_dirname=save_dir, words=words)
    assert names == ["firstw", "secondw", "thirdw", "forthw"]
    assert probs.shape == (8, VOCAB)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)
    assert np.mean(probs.argmax(axis=1) == np.arange(8) + 4) > 0.5, probs.argmax(axis=1)


def test_an_inference_model_needs_targets(tmp_path):
    """As in Paddle, only export_for_deployment=False saves a program without targets."""
    import graphc.fluid as fluid
    x = fluid.layers.data(name="x", shape=[3], dtype="float32")
    fluid.layers.fc(input=x, size=2)
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(fluid.default_startup_program())
        with pytest.raises(graphc.GraphcError, match="target_vars is empty"):
            fluid.io.save_inference_model(str(tmp_path / "m"), ["x"], [], exe)
        fluid.io.save_inference_model(str(tmp_path / "full"), [], [], exe,
                                      export_for_deployment=False)
    assert (tmp_path / "full" / "__model__.main_program").is_file()
    assert not (tmp_path / "full" / "__model__").exists()
