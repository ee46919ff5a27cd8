"""Book chapter 01 as the PaddlePaddle/book repository spells it for Fluid 1.8, written for
graphc's tests: fluid.data with a None batch dimension, a train_test loop over a cloned test
program, save_inference_model, and inference in its own scope."""

import numpy as np
import paddle
import paddle.fluid as fluid

BATCH_SIZE = 20


def train_test(executor, program, reader, feeder, fetch_list):
    accumulated = 1 * [0]
    count = 0
    for data_test in reader():
        outs = executor.run(program=program, feed=feeder.feed(data_test),
                            fetch_list=fetch_list)
        accumulated = [x_c + x_d[0] for x_c, x_d in zip(accumulated, outs)]
        count += 1
    return [x_d / count for x_d in accumulated]


def main(params_dirname, num_epochs=20):
    train_reader = paddle.batch(
        paddle.reader.shuffle(paddle.dataset.uci_housing.train(), buf_size=500),
        batch_size=BATCH_SIZE)
    test_reader = paddle.batch(
        paddle.reader.shuffle(paddle.dataset.uci_housing.test(), buf_size=500),
        batch_size=BATCH_SIZE)

    x = fluid.data(name="x", shape=[None, 13], dtype="float32")
    y = fluid.data(name="y", shape=[None, 1], dtype="float32")
    main_program = fluid.default_main_program()
    startup_program = fluid.default_startup_program()

    y_predict = fluid.layers.fc(input=x, size=1, act=None)
    cost = fluid.layers.square_error_cost(input=y_predict, label=y)
    avg_loss = fluid.layers.mean(cost)
    test_program = main_program.clone(for_test=True)

    sgd_optimizer = fluid.optimizer.SGD(learning_rate=0.2)
    sgd_optimizer.minimize(avg_loss)

    place = fluid.CPUPlace()
    exe = fluid.Executor(place)
    exe.run(startup_program)
    feeder = fluid.DataFeeder(place=place, feed_list=[x, y])

    train_losses, test_losses = [], []
    for _pass_id in range(num_epochs):
        for data_train in train_reader():
            avg_loss_value, = exe.run(main_program, feed=feeder.feed(data_train),
                                      fetch_list=[avg_loss])
            train_losses.append(float(avg_loss_value[0]))
        test_metics = train_test(executor=exe, program=test_program, reader=test_reader,
                                 fetch_list=[avg_loss.name], feeder=feeder)
        test_losses.append(float(test_metics[0]))
    fluid.io.save_inference_model(params_dirname, ["x"], [y_predict], exe)

    infer_exe = fluid.Executor(place)
    inference_scope = fluid.core.Scope()
    with fluid.scope_guard(inference_scope):
        [inference_program, feed_target_names, fetch_targets] = (
            fluid.io.load_inference_model(params_dirname, infer_exe))
        batch_size = 10
        infer_reader = paddle.batch(paddle.dataset.uci_housing.test(), batch_size=batch_size)
        infer_data = next(infer_reader())
        infer_feat = np.array([data[0] for data in infer_data]).astype("float32")
        infer_label = np.array([data[1] for data in infer_data]).astype("float32")
        results = infer_exe.run(inference_program, feed={feed_target_names[0]: infer_feat},
                                fetch_list=fetch_targets)
    return train_losses, test_losses, infer_label, results[0]
