"""Book chapter 03, image_classification, written for graphc's tests in Paddle Fluid 1.8
spelling: a ResNet for cifar10 and a VGG of nets.img_conv_group blocks (with batch norm and
dropout), trained on cifar10, tested, saved as an inference model, loaded and run. Widths,
depths and the image size are parameters so that tests can keep them tiny."""

import numpy as np
import paddle
import paddle.fluid as fluid

BATCH_SIZE = 16


def resnet_cifar10(input, depth=32, base=16, image_size=32):
    def conv_bn_layer(input, ch_out, filter_size, stride, padding, act="relu",
                      bias_attr=False):
        tmp = fluid.layers.conv2d(input=input, filter_size=filter_size, num_filters=ch_out,
                                  stride=stride, padding=padding, act=None,
                                  bias_attr=bias_attr)
        return fluid.layers.batch_norm(input=tmp, act=act)

    def shortcut(input, ch_in, ch_out, stride):
        if ch_in != ch_out:
            return conv_bn_layer(input, ch_out, 1, stride, 0, None)
        return input

    def basicblock(input, ch_in, ch_out, stride):
        tmp = conv_bn_layer(input, ch_out, 3, stride, 1)
        tmp = conv_bn_layer(tmp, ch_out, 3, 1, 1, act=None, bias_attr=True)
        short = shortcut(input, ch_in, ch_out, stride)
        return fluid.layers.elementwise_add(x=tmp, y=short, act="relu")

    def layer_warp(block_func, input, ch_in, ch_out, count, stride):
        tmp = block_func(input, ch_in, ch_out, stride)
        for _ in range(1, count):
            tmp = block_func(tmp, ch_out, ch_out, 1)
        return tmp

    assert (depth - 2) % 6 == 0
    n = (depth - 2) // 6
    conv1 = conv_bn_layer(input=input, ch_out=base, filter_size=3, stride=1, padding=1)
    res1 = layer_warp(basicblock, conv1, base, base, n, 1)
    res2 = layer_warp(basicblock, res1, base, base * 2, n, 2)
    res3 = layer_warp(basicblock, res2, base * 2, base * 4, n, 2)
    pool = fluid.layers.pool2d(input=res3, pool_size=image_size // 4, pool_type="avg",
                               pool_stride=1)
    return pool


def vgg16_bn_drop(input, widths=(64, 128, 256, 512, 512), groups=(2, 2, 3, 3, 3),
                  fc_size=512):
    def conv_block(ipt, num_filter, groups, dropouts):
        return fluid.nets.img_conv_group(
            input=ipt, pool_size=2, pool_stride=2, conv_num_filter=[num_filter] * groups,
            conv_filter_size=3, conv_act="relu", conv_with_batchnorm=True,
            conv_batchnorm_drop_rate=dropouts, pool_type="max")

    out = input
    for width, group in zip(widths, groups):
        out = conv_block(out, width, group, [0.3] * (group - 1) + [0])
    drop = fluid.layers.dropout(x=out, dropout_prob=0.5)
    fc1 = fluid.layers.fc(input=drop, size=fc_size, act=None)
    bn = fluid.layers.batch_norm(input=fc1, act="relu")
    drop2 = fluid.layers.dropout(x=bn, dropout_prob=0.5)
    fc2 = fluid.layers.fc(input=drop2, size=fc_size, act=None)
    return fc2


def train(net_type, use_cuda, save_dirname, image_size=32, num_passes=2, net_args=None,
          learning_rate=0.001):
    classdim = 10
    data_shape = [3, image_size, image_size]
    images = fluid.layers.data(name="pixel", shape=data_shape, dtype="float32")
    label = fluid.layers.data(name="label", shape=[1], dtype="int64")
    if net_type == "vgg":
        net = vgg16_bn_drop(images, **(net_args or {}))
    elif net_type == "resnet":
        net = resnet_cifar10(images, image_size=image_size, **(net_args or {}))
    else:
        raise ValueError(f"{net_type} network is not supported")

    predict = fluid.layers.fc(input=net, size=classdim, act="softmax")
    cost = fluid.layers.cross_entropy(input=predict, label=label)
    avg_cost = fluid.layers.mean(cost)
    acc = fluid.layers.accuracy(input=predict, label=label)

    test_program = fluid.default_main_program().clone(for_test=True)
    optimizer = fluid.optimizer.Adam(learning_rate=learning_rate)
    optimizer.minimize(avg_cost)

    train_reader = paddle.batch(
        paddle.reader.shuffle(paddle.dataset.cifar.train10(), buf_size=128 * 10),
        batch_size=BATCH_SIZE)
    test_reader = paddle.batch(paddle.dataset.cifar.test10(), batch_size=BATCH_SIZE)

    place = fluid.CUDAPlace(0) if use_cuda else fluid.CPUPlace()
    exe = fluid.Executor(place)
    feeder = fluid.DataFeeder(place=place, feed_list=[images, label])
    exe.run(fluid.default_startup_program())

    losses = []
    for _pass_id in range(num_passes):
        for data in train_reader():
            loss_v, acc_v = exe.run(fluid.default_main_program(), feed=feeder.feed(data),
                                    fetch_list=[avg_cost, acc])
            if np.isnan(float(np.array(loss_v)[0])):
                raise AssertionError("got NaN loss, training failed.")
            losses.append(float(np.array(loss_v)[0]))

    test_accs, test_probs = [], []
    for data in test_reader():
        acc_t, prob_t = exe.run(test_program, feed=feeder.feed(data),
                                fetch_list=[acc, predict])
        test_accs.append(float(np.array(acc_t)[0]))
        test_probs.append(np.array(prob_t))
    fluid.io.save_inference_model(save_dirname, ["pixel"], [predict], exe)
    return losses, float(np.mean(test_accs)), np.concatenate(test_probs)


def infer(use_cuda, save_dirname, images):
    place = fluid.CUDAPlace(0) if use_cuda else fluid.CPUPlace()
    exe = fluid.Executor(place)
    inference_scope = fluid.core.Scope()
    with fluid.scope_guard(inference_scope):
        [inference_program, feed_target_names, fetch_targets] = (
            fluid.io.load_inference_model(save_dirname, exe))
        results = exe.run(inference_program, feed={feed_target_names[0]: images},
                          fetch_list=fetch_targets)
    return feed_target_names, results[0]
