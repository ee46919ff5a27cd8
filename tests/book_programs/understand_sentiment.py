"""Book chapter 06, understand_sentiment, written for graphc's tests in Paddle Fluid 1.8
spelling: a convolution net (two nets.sequence_conv_pool) and a stacked dynamic_lstm net
over LoD word sequences, trained on imdb, saved and inferred on a random LoD batch."""

import math

import numpy as np
import paddle
import paddle.fluid as fluid

CLASS_DIM = 2
EMB_DIM = 16
HID_DIM = 16
BATCH_SIZE = 16


def convolution_net(data, label, input_dim, class_dim=CLASS_DIM, emb_dim=EMB_DIM,
                    hid_dim=HID_DIM):
    emb = fluid.layers.embedding(input=data, size=[input_dim, emb_dim], is_sparse=True)
    conv_3 = fluid.nets.sequence_conv_pool(input=emb, num_filters=hid_dim, filter_size=3,
                                           act="tanh", pool_type="sqrt")
    conv_4 = fluid.nets.sequence_conv_pool(input=emb, num_filters=hid_dim, filter_size=4,
                                           act="tanh", pool_type="sqrt")
    prediction = fluid.layers.fc(input=[conv_3, conv_4], size=class_dim, act="softmax")
    cost = fluid.layers.cross_entropy(input=prediction, label=label)
    avg_cost = fluid.layers.mean(cost)
    accuracy = fluid.layers.accuracy(input=prediction, label=label)
    return avg_cost, accuracy, prediction


def stacked_lstm_net(data, label, input_dim, class_dim=CLASS_DIM, emb_dim=EMB_DIM,
                     hid_dim=HID_DIM, stacked_num=3):
    assert stacked_num % 2 == 1
    emb = fluid.layers.embedding(input=data, size=[input_dim, emb_dim], is_sparse=True)
    # the fc gives the four gates' pre-activations: the LSTM's hidden size is hid_dim / 4
    fc1 = fluid.layers.fc(input=emb, size=hid_dim)
    lstm1, cell1 = fluid.layers.dynamic_lstm(input=fc1, size=hid_dim)
    inputs = [fc1, lstm1]
    for i in range(2, stacked_num + 1):
        fc = fluid.layers.fc(input=inputs, size=hid_dim)
        lstm, cell = fluid.layers.dynamic_lstm(input=fc, size=hid_dim,
                                               is_reverse=(i % 2) == 0)
        inputs = [fc, lstm]
    fc_last = fluid.layers.sequence_pool(input=inputs[0], pool_type="max")
    lstm_last = fluid.layers.sequence_pool(input=inputs[1], pool_type="max")
    prediction = fluid.layers.fc(input=[fc_last, lstm_last], size=class_dim, act="softmax")
    cost = fluid.layers.cross_entropy(input=prediction, label=label)
    avg_cost = fluid.layers.mean(cost)
    accuracy = fluid.layers.accuracy(input=prediction, label=label)
    return avg_cost, accuracy, prediction


def train(word_dict, net_method, use_cuda, save_dirname, num_passes=3, learning_rate=0.05):
    dict_dim = len(word_dict)
    data = fluid.layers.data(name="words", shape=[1], dtype="int64", lod_level=1)
    label = fluid.layers.data(name="label", shape=[1], dtype="int64")
    cost, acc_out, prediction = net_method(data, label, input_dim=dict_dim)

    adagrad = fluid.optimizer.Adagrad(learning_rate=learning_rate)
    adagrad.minimize(cost)

    train_data = paddle.batch(
        paddle.reader.shuffle(paddle.dataset.imdb.train(word_dict), buf_size=1000),
        batch_size=BATCH_SIZE)
    place = fluid.CUDAPlace(0) if use_cuda else fluid.CPUPlace()
    exe = fluid.Executor(place)
    feeder = fluid.DataFeeder(feed_list=[data, label], place=place)
    exe.run(fluid.default_startup_program())

    losses, accs = [], []
    for _pass_id in range(num_passes):
        for data_batch in train_data():
            cost_val, acc_val = exe.run(fluid.default_main_program(),
                                        feed=feeder.feed(data_batch),
                                        fetch_list=[cost, acc_out])
            if math.isnan(float(cost_val[0])):
                raise AssertionError("got NaN loss, training failed.")
            losses.append(float(cost_val[0]))
            accs.append(float(acc_val[0]))
    fluid.io.save_inference_model(save_dirname, ["words"], prediction, exe)
    return losses, accs


def infer(word_dict, use_cuda, save_dirname, recursive_seq_lens=((3, 4, 2),), tensor=None):
    """As Paddle's test: a LoD batch of random word ids (or the given LoDTensor)."""
    place = fluid.CUDAPlace(0) if use_cuda else fluid.CPUPlace()
    exe = fluid.Executor(place)
    inference_scope = fluid.core.Scope()
    with fluid.scope_guard(inference_scope):
        [inference_program, feed_target_names, fetch_targets] = (
            fluid.io.load_inference_model(save_dirname, exe))
        word_dict_len = len(word_dict)
        if tensor is None:
            tensor = fluid.create_random_int_lodtensor(
                [list(lens) for lens in recursive_seq_lens], base_shape=[1], place=place,
                low=0, high=word_dict_len - 1)
        results = exe.run(inference_program, feed={feed_target_names[0]: tensor},
                          fetch_list=fetch_targets, return_numpy=False)
    return feed_target_names, np.array(results[0])
