"""Book chapter 02, recognize_digits, written for graphc's tests in Paddle Fluid 1.8 spelling:
softmax regression, a multilayer perceptron and a conv net (nets.simple_img_conv_pool with
batch norm) on mnist; each trains, is tested, saved as an inference model and loaded again."""

import numpy as np
import paddle
import paddle.fluid as fluid

BATCH_SIZE = 32


def softmax_regression(img):
    return fluid.layers.fc(input=img, size=10, act="softmax")


def multilayer_perceptron(img):
    hidden = fluid.layers.fc(input=img, size=32, act="relu")
    hidden = fluid.layers.fc(input=hidden, size=32, act="relu")
    return fluid.layers.fc(input=hidden, size=10, act="softmax")


def convolutional_neural_network(img):
    conv_pool_1 = fluid.nets.simple_img_conv_pool(
        input=img, filter_size=5, num_filters=4, pool_size=2, pool_stride=2, act="relu")
    conv_pool_1 = fluid.layers.batch_norm(conv_pool_1)
    conv_pool_2 = fluid.nets.simple_img_conv_pool(
        input=conv_pool_1, filter_size=5, num_filters=8, pool_size=2, pool_stride=2,
        act="relu")
    return fluid.layers.fc(input=conv_pool_2, size=10, act="softmax")


def train(nn_type, use_cuda, save_dirname, model_filename=None, params_filename=None,
          save_full_dirname=None, num_passes=2):
    img = fluid.layers.data(name="img", shape=[1, 28, 28], dtype="float32")
    label = fluid.layers.data(name="label", shape=[1], dtype="int64")
    net = {"softmax_regression": softmax_regression, "mlp": multilayer_perceptron,
           "conv": convolutional_neural_network}[nn_type]
    prediction = net(img)
    loss = fluid.layers.cross_entropy(input=prediction, label=label)
    avg_loss = fluid.layers.mean(loss)
    acc = fluid.layers.accuracy(input=prediction, label=label)

    main_program = fluid.default_main_program()
    test_program = main_program.clone(for_test=True)
    optimizer = fluid.optimizer.Adam(learning_rate=0.01)
    optimizer.minimize(avg_loss)

    place = fluid.CUDAPlace(0) if use_cuda else fluid.CPUPlace()
    exe = fluid.Executor(place)
    train_reader = paddle.batch(paddle.reader.shuffle(paddle.dataset.mnist.train(),
                                                      buf_size=500), batch_size=BATCH_SIZE)
    test_reader = paddle.batch(paddle.dataset.mnist.test(), batch_size=BATCH_SIZE)
    feeder = fluid.DataFeeder(feed_list=[img, label], place=place)
    exe.run(fluid.default_startup_program())

    losses = []
    for _pass_id in range(num_passes):
        for data in train_reader():
            loss_v, acc_v = exe.run(main_program, feed=feeder.feed(data),
                                    fetch_list=[avg_loss, acc])
            losses.append(float(np.array(loss_v)[0]))
    test_accs = []
    for data in test_reader():
        acc_t, = exe.run(test_program, feed=feeder.feed(data), fetch_list=[acc])
        test_accs.append(float(np.array(acc_t)[0]))
    fluid.io.save_inference_model(save_dirname, ["img"], [prediction], exe,
                                  model_filename=model_filename,
                                  params_filename=params_filename)
    if save_full_dirname is not None:
        # the whole training program, not pruned for inference
        fluid.io.save_inference_model(save_full_dirname, [], [], exe,
                                      model_filename=model_filename,
                                      params_filename=params_filename,
                                      export_for_deployment=False)
    return losses, float(np.mean(test_accs))


def infer(use_cuda, save_dirname, images, model_filename=None, params_filename=None):
    place = fluid.CUDAPlace(0) if use_cuda else fluid.CPUPlace()
    exe = fluid.Executor(place)
    inference_scope = fluid.core.Scope()
    with fluid.scope_guard(inference_scope):
        [inference_program, feed_target_names, fetch_targets] = (
            fluid.io.load_inference_model(save_dirname, exe, model_filename,
                                          params_filename))
        results = exe.run(inference_program, feed={feed_target_names[0]: images},
                          fetch_list=fetch_targets)
    return results[0]
