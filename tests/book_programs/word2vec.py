"""Book chapter 04, word2vec, written for graphc's tests in Paddle Fluid 1.8 spelling: an
N-gram language model whose four context embeddings share one table (param_attr='shared_w'),
dense or sparse, trained on imikolov, saved as an inference model, loaded and run."""

import numpy as np
import paddle
import paddle.fluid as fluid

EMBED_SIZE = 16
HIDDEN_SIZE = 32
N = 5
BATCH_SIZE = 32


def train(use_cuda, is_sparse, save_dirname, num_passes=6, learning_rate=2.0):
    word_dict = paddle.dataset.imikolov.build_dict()
    dict_size = len(word_dict)

    first_word = fluid.layers.data(name="firstw", shape=[1], dtype="int64")
    second_word = fluid.layers.data(name="secondw", shape=[1], dtype="int64")
    third_word = fluid.layers.data(name="thirdw", shape=[1], dtype="int64")
    forth_word = fluid.layers.data(name="forthw", shape=[1], dtype="int64")
    next_word = fluid.layers.data(name="nextw", shape=[1], dtype="int64")

    def embed(word):
        return fluid.layers.embedding(input=word, size=[dict_size, EMBED_SIZE],
                                      dtype="float32", is_sparse=is_sparse,
                                      param_attr="shared_w")

    embeddings = [embed(w) for w in (first_word, second_word, third_word, forth_word)]
    concat_embed = fluid.layers.concat(input=embeddings, axis=1)
    hidden1 = fluid.layers.fc(input=concat_embed, size=HIDDEN_SIZE, act="sigmoid")
    predict_word = fluid.layers.fc(input=hidden1, size=dict_size, act="softmax")
    cost = fluid.layers.cross_entropy(input=predict_word, label=next_word)
    avg_cost = fluid.layers.mean(cost)

    sgd_optimizer = fluid.optimizer.SGD(learning_rate=learning_rate)
    sgd_optimizer.minimize(avg_cost)

    train_reader = paddle.batch(paddle.dataset.imikolov.train(word_dict, N), BATCH_SIZE)
    place = fluid.CUDAPlace(0) if use_cuda else fluid.CPUPlace()
    exe = fluid.Executor(place)
    feeder = fluid.DataFeeder(
        feed_list=[first_word, second_word, third_word, forth_word, next_word], place=place)
    exe.run(fluid.default_startup_program())

    losses = []
    for _pass_id in range(num_passes):
        for data in train_reader():
            avg_cost_np = exe.run(fluid.default_main_program(), feed=feeder.feed(data),
                                  fetch_list=[avg_cost])
            if np.isnan(float(avg_cost_np[0][0])):
                raise AssertionError("got NaN loss, training failed.")
            losses.append(float(avg_cost_np[0][0]))
    fluid.io.save_inference_model(save_dirname, ["firstw", "secondw", "thirdw", "forthw"],
                                  [predict_word], exe)
    return losses


def infer(use_cuda, save_dirname, words):
    place = fluid.CUDAPlace(0) if use_cuda else fluid.CPUPlace()
    exe = fluid.Executor(place)
    inference_scope = fluid.core.Scope()
    with fluid.scope_guard(inference_scope):
        [inference_program, feed_target_names, fetch_targets] = (
            fluid.io.load_inference_model(save_dirname, exe))
        feed = {name: np.asarray(words[i], dtype="int64").reshape(-1, 1)
                for i, name in enumerate(feed_target_names)}
        results = exe.run(inference_program, feed=feed, fetch_list=fetch_targets,
                          return_numpy=False)
    return feed_target_names, np.array(results[0])
