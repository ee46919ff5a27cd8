"""Book chapter 01, fit_a_line, written for graphc's tests in Paddle Fluid 1.8 spelling: linear
regression on uci_housing, trained, saved as an inference model, loaded and run."""

import numpy as np
import paddle
import paddle.fluid as fluid

BATCH_SIZE = 20


def train(use_cuda, save_dirname, num_passes=20, learning_rate=0.2):
    x = fluid.layers.data(name="x", shape=[13], dtype="float32")
    y = fluid.layers.data(name="y", shape=[1], dtype="float32")
    y_predict = fluid.layers.fc(input=x, size=1, act=None)
    cost = fluid.layers.square_error_cost(input=y_predict, label=y)
    avg_cost = fluid.layers.mean(cost)
    sgd_optimizer = fluid.optimizer.SGD(learning_rate=learning_rate)
    sgd_optimizer.minimize(avg_cost)

    train_reader = paddle.batch(
        paddle.reader.shuffle(paddle.dataset.uci_housing.train(), buf_size=500),
        batch_size=BATCH_SIZE)
    place = fluid.CUDAPlace(0) if use_cuda else fluid.CPUPlace()
    feeder = fluid.DataFeeder(place=place, feed_list=[x, y])
    exe = fluid.Executor(place)
    exe.run(fluid.default_startup_program())

    losses = []
    for _pass_id in range(num_passes):
        for data in train_reader():
            avg_loss_value, = exe.run(fluid.default_main_program(), feed=feeder.feed(data),
                                      fetch_list=[avg_cost])
            if np.isnan(float(avg_loss_value[0])):
                raise AssertionError("got NaN loss, training failed.")
            losses.append(float(avg_loss_value[0]))
    fluid.io.save_inference_model(save_dirname, ["x"], [y_predict], exe)
    return losses


def infer(use_cuda, save_dirname):
    place = fluid.CUDAPlace(0) if use_cuda else fluid.CPUPlace()
    exe = fluid.Executor(place)
    inference_scope = fluid.core.Scope()
    with fluid.scope_guard(inference_scope):
        [inference_program, feed_target_names, fetch_targets] = (
            fluid.io.load_inference_model(save_dirname, exe))
        test_reader = paddle.batch(paddle.dataset.uci_housing.test(), batch_size=10)
        test_data = next(test_reader())
        test_feat = np.array([data[0] for data in test_data]).astype("float32")
        test_label = np.array([data[1] for data in test_data]).astype("float32")
        results = exe.run(inference_program, feed={feed_target_names[0]: test_feat},
                          fetch_list=fetch_targets)
    return feed_target_names, test_feat, test_label, results[0]
