"""Book chapter 07, label_semantic_roles, written for graphc's tests in Paddle Fluid 1.8
spelling: eight LoD features, six word embeddings sharing one frozen pretrained table (by
name), a stack of dynamic_lstm alternating is_reverse, linear_chain_crf, crf_decoding and
chunk_eval, trained on conll05, saved and inferred on random LoD input."""

import math

import numpy as np
import paddle
import paddle.dataset.conll05 as conll05
import paddle.fluid as fluid

word_dict, verb_dict, label_dict = conll05.get_dict()
word_dict_len = len(word_dict)
label_dict_len = len(label_dict)
pred_dict_len = len(verb_dict)

mark_dict_len = 2
word_dim = 8
mark_dim = 4
hidden_dim = 32
depth = 4
mix_hidden_lr = 1e-3

IS_SPARSE = True
PASS_NUM = 4
BATCH_SIZE = 16

embedding_name = "emb"
FEED_NAMES = ["word_data", "verb_data", "ctx_n2_data", "ctx_n1_data", "ctx_0_data",
              "ctx_p1_data", "ctx_p2_data", "mark_data"]


def load_parameter(file_name, h, w):
    with open(file_name, "rb") as f:
        f.read(16)  # skip the header
        return np.fromfile(f, dtype=np.float32).reshape(h, w)


def db_lstm(word, predicate, ctx_n2, ctx_n1, ctx_0, ctx_p1, ctx_p2, mark, **ignored):
    # 8 features
    predicate_embedding = fluid.layers.embedding(
        input=predicate, size=[pred_dict_len, word_dim], dtype="float32",
        is_sparse=IS_SPARSE, param_attr="vemb")
    mark_embedding = fluid.layers.embedding(
        input=mark, size=[mark_dict_len, mark_dim], dtype="float32", is_sparse=IS_SPARSE)

    word_input = [word, ctx_n2, ctx_n1, ctx_0, ctx_p1, ctx_p2]
    emb_layers = [
        fluid.layers.embedding(size=[word_dict_len, word_dim], input=x,
                               param_attr=fluid.ParamAttr(name=embedding_name,
                                                          trainable=False))
        for x in word_input]
    emb_layers.append(predicate_embedding)
    emb_layers.append(mark_embedding)

    hidden_0_layers = [fluid.layers.fc(input=emb, size=hidden_dim, act="tanh")
                       for emb in emb_layers]
    hidden_0 = fluid.layers.sums(input=hidden_0_layers)

    lstm_0 = fluid.layers.dynamic_lstm(input=hidden_0, size=hidden_dim,
                                       candidate_activation="relu",
                                       gate_activation="sigmoid",
                                       cell_activation="sigmoid")

    # stack L-LSTM and R-LSTM with direct edges
    input_tmp = [hidden_0, lstm_0]
    for i in range(1, depth):
        mix_hidden = fluid.layers.sums(input=[
            fluid.layers.fc(input=input_tmp[0], size=hidden_dim, act="tanh"),
            fluid.layers.fc(input=input_tmp[1], size=hidden_dim, act="tanh")])
        lstm = fluid.layers.dynamic_lstm(input=mix_hidden, size=hidden_dim,
                                         candidate_activation="relu",
                                         gate_activation="sigmoid",
                                         cell_activation="sigmoid",
                                         is_reverse=((i % 2) == 1))
        input_tmp = [mix_hidden, lstm]

    feature_out = fluid.layers.sums(input=[
        fluid.layers.fc(input=input_tmp[0], size=label_dict_len, act="tanh"),
        fluid.layers.fc(input=input_tmp[1], size=label_dict_len, act="tanh")])
    return feature_out


def train(use_cuda, save_dirname, learning_rate=0.01):
    # define network topology
    word = fluid.layers.data(name="word_data", shape=[1], dtype="int64", lod_level=1)
    predicate = fluid.layers.data(name="verb_data", shape=[1], dtype="int64", lod_level=1)
    ctx_n2 = fluid.layers.data(name="ctx_n2_data", shape=[1], dtype="int64", lod_level=1)
    ctx_n1 = fluid.layers.data(name="ctx_n1_data", shape=[1], dtype="int64", lod_level=1)
    ctx_0 = fluid.layers.data(name="ctx_0_data", shape=[1], dtype="int64", lod_level=1)
    ctx_p1 = fluid.layers.data(name="ctx_p1_data", shape=[1], dtype="int64", lod_level=1)
    ctx_p2 = fluid.layers.data(name="ctx_p2_data", shape=[1], dtype="int64", lod_level=1)
    mark = fluid.layers.data(name="mark_data", shape=[1], dtype="int64", lod_level=1)
    feature_out = db_lstm(**locals())
    target = fluid.layers.data(name="target", shape=[1], dtype="int64", lod_level=1)
    crf_cost = fluid.layers.linear_chain_crf(
        input=feature_out, label=target,
        param_attr=fluid.ParamAttr(name="crfw", learning_rate=mix_hidden_lr))
    avg_cost = fluid.layers.mean(crf_cost)

    sgd_optimizer = fluid.optimizer.SGD(learning_rate=fluid.layers.exponential_decay(
        learning_rate=learning_rate, decay_steps=100000, decay_rate=0.5, staircase=True))
    sgd_optimizer.minimize(avg_cost)

    crf_decode = fluid.layers.crf_decoding(input=feature_out,
                                           param_attr=fluid.ParamAttr(name="crfw"))
    (precision, recall, f1_score, num_infer_chunks, num_label_chunks,
     num_correct_chunks) = fluid.layers.chunk_eval(
        input=crf_decode, label=target, chunk_scheme="IOB",
        num_chunk_types=int(math.ceil((label_dict_len - 1) / 2.0)))

    train_data = paddle.batch(
        paddle.reader.shuffle(paddle.dataset.conll05.test(), buf_size=8192),
        batch_size=BATCH_SIZE)
    place = fluid.CUDAPlace(0) if use_cuda else fluid.CPUPlace()
    feeder = fluid.DataFeeder(
        feed_list=[word, ctx_n2, ctx_n1, ctx_0, ctx_p1, ctx_p2, predicate, mark, target],
        place=place)
    exe = fluid.Executor(place)

    exe.run(fluid.default_startup_program())
    embedding_param = fluid.global_scope().find_var(embedding_name).get_tensor()
    embedding_param.set(load_parameter(conll05.get_embedding(), word_dict_len, word_dim),
                        place)

    losses, f1s = [], []
    for _pass_id in range(PASS_NUM):
        for data in train_data():
            cost, f1 = exe.run(fluid.default_main_program(), feed=feeder.feed(data),
                               fetch_list=[avg_cost, f1_score])
            if math.isnan(float(cost[0])):
                raise AssertionError("got NaN loss, training failed.")
            losses.append(float(cost[0]))
            f1s.append(float(f1[0]))
    fluid.io.save_inference_model(save_dirname, FEED_NAMES, [feature_out], exe)
    return losses, f1s


def infer(use_cuda, save_dirname, recursive_seq_lens=((3, 4, 2),), feed=None):
    """As Paddle's test: random LoD ids for each feature (or the given LoDTensors); returns
    the emissions as a LoDTensor."""
    place = fluid.CUDAPlace(0) if use_cuda else fluid.CPUPlace()
    exe = fluid.Executor(place)
    inference_scope = fluid.core.Scope()
    with fluid.scope_guard(inference_scope):
        [inference_program, feed_target_names, fetch_targets] = (
            fluid.io.load_inference_model(save_dirname, exe))
        lens = [list(level) for level in recursive_seq_lens]
        highs = {"verb_data": pred_dict_len - 1, "mark_data": mark_dict_len - 1}
        if feed is None:
            feed = {name: fluid.create_random_int_lodtensor(
                lens, base_shape=[1], place=place, low=0,
                high=highs.get(name, word_dict_len - 1)) for name in FEED_NAMES}
        assert feed_target_names == FEED_NAMES, feed_target_names
        results = exe.run(inference_program, feed=feed, fetch_list=fetch_targets,
                          return_numpy=False)
    return feed_target_names, results[0]
