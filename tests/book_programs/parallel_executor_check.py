"""Paddle 1.x's parallel-executor unit-test harness, written for graphc's tests in Fluid 1.8
spelling: the mnist-like nets (an fc stack, fc with batch norm), a small SE-ResNeXt, and
check_network_convergence, which builds a model with a fixed random_seed, compiles it with a
BuildStrategy (single device or with_data_parallel on CPU_NUM places) and returns the first
and last loss of a few steps on one fixed batch."""

import math
import os
import time

import numpy as np
import paddle
import paddle.fluid as fluid
import paddle.fluid.core as core
from paddle.fluid import compiler

HIDDEN = 32
CLASSES = 10


def simple_fc_net(use_feed=True):
    img = fluid.layers.data(name="image", shape=[784], dtype="float32")
    label = fluid.layers.data(name="label", shape=[1], dtype="int64")
    hidden = img
    for _ in range(4):
        hidden = fluid.layers.fc(
            hidden, size=HIDDEN, act="tanh",
            bias_attr=fluid.ParamAttr(initializer=fluid.initializer.Constant(value=1.0)))
    prediction = fluid.layers.fc(hidden, size=CLASSES, act="softmax")
    loss = fluid.layers.cross_entropy(input=prediction, label=label)
    return fluid.layers.mean(loss)


def fc_with_batchnorm(use_feed=True):
    img = fluid.layers.data(name="image", shape=[784], dtype="float32")
    label = fluid.layers.data(name="label", shape=[1], dtype="int64")
    hidden = img
    for _ in range(2):
        with fluid.name_scope("hidden"):
            hidden = fluid.layers.fc(
                hidden, size=HIDDEN, act="tanh",
                bias_attr=fluid.ParamAttr(initializer=fluid.initializer.Constant(value=1.0)))
            hidden = fluid.layers.batch_norm(input=hidden)
    with fluid.name_scope("fc_layer"):
        prediction = fluid.layers.fc(hidden, size=CLASSES, act="softmax")
    with fluid.name_scope("loss"):
        loss = fluid.layers.cross_entropy(input=prediction, label=label)
        loss = fluid.layers.mean(loss)
    return loss


def sparse_embedding_net(use_feed=True, dict_size=50, emb_dim=8):
    """Eight word ids per sample through one sparse embedding table (Paddle's fused-optimizer
    tests run Adam over a sparse gradient this way), summed and classified."""
    words = fluid.layers.data(name="image", shape=[8], dtype="int64")
    label = fluid.layers.data(name="label", shape=[1], dtype="int64")
    emb = fluid.layers.embedding(input=fluid.layers.unsqueeze(words, axes=[2]),
                                 size=[dict_size, emb_dim], is_sparse=True,
                                 param_attr=fluid.ParamAttr(name="emb"))
    bow = fluid.layers.reduce_sum(emb, dim=1)
    hidden = fluid.layers.fc(input=bow, size=HIDDEN, act="tanh")
    prediction = fluid.layers.fc(input=hidden, size=CLASSES, act="softmax")
    loss = fluid.layers.cross_entropy(input=prediction, label=label)
    return fluid.layers.mean(loss)


def ngram_net(use_feed=True, is_sparse=True, dict_size=50, emb_dim=8):
    """word2vec's N-gram model: four context words looked up in one table named 'shared_w'
    (their gradients add up), concatenated, a hidden layer and the next word's softmax."""
    context = fluid.layers.data(name="image", shape=[4], dtype="int64")
    next_word = fluid.layers.data(name="label", shape=[1], dtype="int64")
    words = fluid.layers.split(context, num_or_sections=4, dim=1)
    embs = [fluid.layers.embedding(input=w, size=[dict_size, emb_dim], dtype="float32",
                                   is_sparse=is_sparse, param_attr="shared_w")
            for w in words]
    hidden = fluid.layers.fc(input=fluid.layers.concat(input=embs, axis=1), size=HIDDEN,
                             act="sigmoid")
    predict = fluid.layers.fc(input=hidden, size=dict_size, act="softmax")
    cost = fluid.layers.cross_entropy(input=predict, label=next_word)
    return fluid.layers.mean(cost)


def init_data(batch_size=32, img_shape=(784,), label_range=CLASSES - 1):
    np.random.seed(5)
    img = np.random.random(size=[batch_size] + list(img_shape)).astype(np.float32)
    label = np.array([np.random.randint(0, label_range) for _ in range(batch_size)])
    return img, label.reshape(-1, 1).astype("int64")


# -- a small SE-ResNeXt (Paddle's seresnext_net, at toy width and depth, no dropout) ---------
def conv_bn_layer(input, num_filters, filter_size, stride=1, groups=1, act=None):
    conv = fluid.layers.conv2d(input=input, num_filters=num_filters,
                               filter_size=filter_size, stride=stride,
                               padding=(filter_size - 1) // 2, groups=groups, act=None,
                               bias_attr=False)
    return fluid.layers.batch_norm(input=conv, act=act, momentum=0.1)


def squeeze_excitation(input, num_channels, reduction_ratio):
    pool = fluid.layers.pool2d(input=input, pool_size=0, pool_type="avg",
                               global_pooling=True)
    stdv = 1.0 / math.sqrt(pool.shape[1] * 1.0)
    squeeze = fluid.layers.fc(
        input=pool, size=num_channels // reduction_ratio, act="relu",
        param_attr=fluid.param_attr.ParamAttr(
            initializer=fluid.initializer.Uniform(-stdv, stdv)))
    stdv = 1.0 / math.sqrt(squeeze.shape[1] * 1.0)
    excitation = fluid.layers.fc(
        input=squeeze, size=num_channels, act="sigmoid",
        param_attr=fluid.param_attr.ParamAttr(
            initializer=fluid.initializer.Uniform(-stdv, stdv)))
    return fluid.layers.elementwise_mul(x=input, y=excitation, axis=0)


def shortcut(input, ch_out, stride):
    ch_in = input.shape[1]
    if ch_in != ch_out:
        filter_size = 1 if stride == 1 else 3
        return conv_bn_layer(input, ch_out, filter_size, stride)
    return input


def bottleneck_block(input, num_filters, stride, cardinality, reduction_ratio):
    conv0 = conv_bn_layer(input, num_filters=num_filters, filter_size=1, act="relu")
    conv1 = conv_bn_layer(conv0, num_filters=num_filters, filter_size=3, stride=stride,
                          groups=cardinality, act="relu")
    conv2 = conv_bn_layer(conv1, num_filters=num_filters * 2, filter_size=1, act=None)
    scale = squeeze_excitation(conv2, num_channels=num_filters * 2,
                               reduction_ratio=reduction_ratio)
    short = shortcut(input, num_filters * 2, stride)
    return fluid.layers.elementwise_add(x=short, y=scale, act="relu")


def se_resnext_small(use_feed=True):
    img = fluid.layers.data(name="image", shape=[3, 8, 8], dtype="float32")
    label = fluid.layers.data(name="label", shape=[1], dtype="int64")
    conv = conv_bn_layer(img, num_filters=8, filter_size=3, act="relu")
    conv = fluid.layers.pool2d(input=conv, pool_size=3, pool_stride=2, pool_padding=1,
                               pool_type="max")
    conv = bottleneck_block(conv, num_filters=8, stride=2, cardinality=2, reduction_ratio=4)
    pool = fluid.layers.pool2d(input=conv, pool_size=0, pool_type="avg", global_pooling=True)
    prediction = fluid.layers.fc(input=pool, size=CLASSES, act="softmax")
    loss = fluid.layers.cross_entropy(input=prediction, label=label)
    return fluid.layers.mean(loss)


def se_resnext_optimizer():
    return fluid.optimizer.Momentum(
        learning_rate=fluid.layers.cosine_decay(learning_rate=0.1, step_each_epoch=5,
                                                epochs=4),
        momentum=0.9, regularization=fluid.regularizer.L2Decay(1e-4))


# -- the harness ------------------------------------------------------------------------------
def run_executor(exe, binary, feed, fetch_list):
    return exe.run(binary, feed=feed, fetch_list=fetch_list)


def check_network_convergence(method, use_cuda=False, iter=5, batch_size=None,
                              feed_dict=None, seed=1, use_parallel_executor=True,
                              use_reduce=False, use_fast_executor=False,
                              fuse_elewise_add_act_ops=False, fuse_all_optimizer_ops=False,
                              fuse_all_reduce_ops=False, fuse_relu_depthwise_conv=False,
                              enable_inplace=False, use_ir_memory_optimize=False,
                              enable_sequential_execution=False, optimizer=None):
    main = fluid.Program()
    startup = fluid.Program()
    startup.random_seed = seed
    main.random_seed = seed
    with fluid.program_guard(main, startup):
        loss = method(use_feed=feed_dict is not None)
        if optimizer is None:
            fluid.optimizer.Adam(learning_rate=0.001).minimize(loss)
        else:
            optimizer().minimize(loss)

    place = fluid.CUDAPlace(0) if use_cuda else fluid.CPUPlace()
    exe = fluid.Executor(place)
    scope = fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        exec_strategy = fluid.ExecutionStrategy()
        if use_fast_executor:
            exec_strategy.use_experimental_executor = True
        build_strategy = fluid.BuildStrategy()
        build_strategy.reduce_strategy = (fluid.BuildStrategy.ReduceStrategy.Reduce if
                                          use_reduce else
                                          fluid.BuildStrategy.ReduceStrategy.AllReduce)
        build_strategy.fuse_elewise_add_act_ops = fuse_elewise_add_act_ops
        build_strategy.fuse_relu_depthwise_conv = fuse_relu_depthwise_conv
        build_strategy.fuse_all_optimizer_ops = fuse_all_optimizer_ops
        build_strategy.fuse_all_reduce_ops = fuse_all_reduce_ops
        build_strategy.memory_optimize = use_ir_memory_optimize
        build_strategy.enable_inplace = enable_inplace
        build_strategy.enable_sequential_execution = enable_sequential_execution
        if use_cuda and core.is_compiled_with_cuda():
            build_strategy.remove_unnecessary_lock = True
        if use_parallel_executor:
            binary = compiler.CompiledProgram(main).with_data_parallel(
                loss_name=loss.name, build_strategy=build_strategy,
                exec_strategy=exec_strategy)
        else:
            binary = compiler.CompiledProgram(main, build_strategy=build_strategy)

        if batch_size is not None:
            batch_size *= (core.get_cuda_device_count() if use_cuda else
                           int(os.environ.get("CPU_NUM", "1")))
        begin = time.time()
        first_loss, = run_executor(exe=exe, binary=binary, feed=feed_dict,
                                   fetch_list=[loss.name])
        for _ in range(iter):
            # the loss is fetched every step: one compiled step serves the whole run
            run_executor(exe=exe, binary=binary, feed=feed_dict, fetch_list=[loss.name])
        last_loss, = run_executor(exe=exe, binary=binary, feed=feed_dict,
                                  fetch_list=[loss.name])
        end = time.time()
        if batch_size is not None:
            print("%.4f Instance per second" % ((batch_size * iter + 2) / (end - begin)))
        avg_last_loss_val = np.array(last_loss).mean()
        avg_first_loss_val = np.array(first_loss).mean()
        if math.isnan(float(avg_last_loss_val)) or math.isnan(float(avg_first_loss_val)):
            raise AssertionError("got NaN loss, training failed.")
    return first_loss, last_loss


def train_with_feeder(method, reader, use_parallel_executor=True, seed=1, batch_size=8,
                      passes=2):
    """The older ParallelExecutor spelling (Paddle 1.0-1.5 tests): a DataFeeder decorates a
    batched reader with one minibatch per device; on one device the same minibatches go
    together. Returns every step's mean loss."""
    main = fluid.Program()
    startup = fluid.Program()
    startup.random_seed = seed
    main.random_seed = seed
    with fluid.program_guard(main, startup):
        loss = method(use_feed=True)
        fluid.optimizer.Momentum(learning_rate=0.05, momentum=0.9).minimize(loss)
        feed_list = [main.global_block().var("image"), main.global_block().var("label")]
    place = fluid.CPUPlace()
    exe = fluid.Executor(place)
    scope = fluid.core.Scope()
    losses = []
    with fluid.scope_guard(scope):
        exe.run(startup)
        feeder = fluid.DataFeeder(feed_list=feed_list, place=place, program=main)
        dev_count = int(os.environ.get("CPU_NUM", "1"))
        if use_parallel_executor:
            pe = fluid.ParallelExecutor(use_cuda=False, loss_name=loss.name, main_program=main)
            assert pe.device_count == dev_count
            reader_fn = feeder.decorate_reader(paddle.batch(reader, batch_size),
                                               multi_devices=True)
            for _ in range(passes):
                for feed in reader_fn():
                    loss_v, = pe.run(fetch_list=[loss.name], feed=feed)
                    losses.append(float(np.mean(loss_v)))
        else:
            big = paddle.batch(reader, batch_size * dev_count)
            for _ in range(passes):
                for data in big():
                    loss_v, = exe.run(main, feed=feeder.feed(data), fetch_list=[loss])
                    losses.append(float(np.mean(loss_v)))
    return losses
