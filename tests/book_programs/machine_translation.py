"""Book chapter 08, machine_translation (training), written for graphc's tests in Paddle
Fluid 1.8 spelling: a dynamic_lstm or bidirectional dynamic_gru encoder over the LoD source
and a DynamicRNN decoder over the LoD target (plain, or the book's attention decoder with
static LoD inputs and gru_unit), trained on wmt14. The chapter's generation step (a While
loop with beam_search, beam_search_decode) is tests/test_lod_beam_search.py's book decoder."""

import numpy as np
import paddle
import paddle.fluid as fluid
import paddle.fluid.layers as pd

dict_size = 50
source_dict_dim = target_dict_dim = dict_size
hidden_dim = 16
word_dim = 16
batch_size = 16
decoder_size = hidden_dim
FEED_ORDER = ["src_word_id", "target_language_word", "target_language_next_word"]


def lstm_encoder(is_sparse):
    src_word_id = pd.data(name="src_word_id", shape=[1], dtype="int64", lod_level=1)
    src_embedding = pd.embedding(input=src_word_id, size=[dict_size, word_dim],
                                 dtype="float32", is_sparse=is_sparse,
                                 param_attr=fluid.ParamAttr(name="vemb"))
    fc1 = pd.fc(input=src_embedding, size=hidden_dim * 4, act="tanh")
    lstm_hidden0, lstm_0 = pd.dynamic_lstm(input=fc1, size=hidden_dim * 4)
    return pd.sequence_last_step(input=lstm_hidden0)


def gru_encoder(is_sparse):
    """Both directions of a GRU: the forward one's last step and the backward one's first
    (each has read the whole source), projected to the decoder's size."""
    src_word_id = pd.data(name="src_word_id", shape=[1], dtype="int64", lod_level=1)
    src_embedding = pd.embedding(input=src_word_id, size=[dict_size, word_dim],
                                 dtype="float32", is_sparse=is_sparse,
                                 param_attr=fluid.ParamAttr(name="vemb"))
    fc_forward = pd.fc(input=src_embedding, size=hidden_dim * 3, bias_attr=False)
    src_forward = pd.dynamic_gru(input=fc_forward, size=hidden_dim)
    fc_backward = pd.fc(input=src_embedding, size=hidden_dim * 3, bias_attr=False)
    src_backward = pd.dynamic_gru(input=fc_backward, size=hidden_dim, is_reverse=True)
    both = pd.concat(input=[pd.sequence_last_step(input=src_forward),
                            pd.sequence_first_step(input=src_backward)], axis=1)
    return pd.fc(input=both, size=decoder_size, act="tanh")


def bigru_states(is_sparse):
    """The book's encoder: every source token's forward and backward GRU states."""
    src_word_id = pd.data(name="src_word_id", shape=[1], dtype="int64", lod_level=1)
    src_embedding = pd.embedding(input=src_word_id, size=[dict_size, word_dim],
                                 dtype="float32", is_sparse=is_sparse,
                                 param_attr=fluid.ParamAttr(name="vemb"))
    fc_forward = pd.fc(input=src_embedding, size=hidden_dim * 3, bias_attr=False)
    src_forward = pd.dynamic_gru(input=fc_forward, size=hidden_dim)
    fc_backward = pd.fc(input=src_embedding, size=hidden_dim * 3, bias_attr=False)
    src_backward = pd.dynamic_gru(input=fc_backward, size=hidden_dim, is_reverse=True)
    return pd.concat(input=[src_forward, src_backward], axis=1)


def attention(encoder_vec, encoder_proj, decoder_state):
    """Additive attention of one decoder step over its sequence's source tokens."""
    state_proj = pd.fc(input=decoder_state, size=decoder_size, bias_attr=False)
    state_expand = pd.sequence_expand(x=state_proj, y=encoder_proj)
    mixed = pd.tanh(x=pd.elementwise_add(encoder_proj, state_expand))
    weights = pd.fc(input=mixed, size=1, act=None, bias_attr=False)
    weights = pd.sequence_softmax(input=weights)
    scaled = pd.elementwise_mul(x=encoder_vec, y=weights, axis=0)
    return pd.sequence_pool(input=scaled, pool_type="sum")


def attention_decoder_train(encoder_out, is_sparse):
    encoder_last = pd.sequence_last_step(input=encoder_out)
    encoder_last_proj = pd.fc(input=encoder_last, size=decoder_size, act="tanh")
    encoder_out_proj = pd.fc(input=encoder_out, size=decoder_size, bias_attr=False)
    trg_language_word = pd.data(name="target_language_word", shape=[1], dtype="int64",
                                lod_level=1)
    trg_embedding = pd.embedding(input=trg_language_word, size=[dict_size, word_dim],
                                 dtype="float32", is_sparse=is_sparse,
                                 param_attr=fluid.ParamAttr(name="vemb"))
    rnn = pd.DynamicRNN()
    with rnn.block():
        current_word = rnn.step_input(trg_embedding)
        encoder_vec = rnn.static_input(encoder_out)
        encoder_proj = rnn.static_input(encoder_out_proj)
        hidden_mem = rnn.memory(init=encoder_last_proj, need_reorder=True)
        context = attention(encoder_vec, encoder_proj, hidden_mem)
        gates = pd.fc(input=[current_word, context], size=decoder_size * 3, bias_attr=False)
        hidden, _, _ = pd.gru_unit(input=gates, hidden=hidden_mem, size=decoder_size * 3)
        rnn.update_memory(hidden_mem, hidden)
        out = pd.fc(input=hidden, size=target_dict_dim, bias_attr=True, act="softmax")
        rnn.output(out)
    return rnn()


def decoder_train(context, is_sparse):
    trg_language_word = pd.data(name="target_language_word", shape=[1], dtype="int64",
                                lod_level=1)
    trg_embedding = pd.embedding(input=trg_language_word, size=[dict_size, word_dim],
                                 dtype="float32", is_sparse=is_sparse,
                                 param_attr=fluid.ParamAttr(name="vemb"))
    rnn = pd.DynamicRNN()
    with rnn.block():
        current_word = rnn.step_input(trg_embedding)
        pre_state = rnn.memory(init=context)
        current_state = pd.fc(input=[current_word, pre_state], size=decoder_size, act="tanh")
        current_score = pd.fc(input=current_state, size=target_dict_dim, act="softmax")
        rnn.update_memory(pre_state, current_state)
        rnn.output(current_score)
    return rnn()


def train_main(use_cuda, is_sparse, encoder="lstm", num_passes=3, learning_rate=0.1):
    if encoder == "attention":
        rnn_out = attention_decoder_train(bigru_states(is_sparse), is_sparse)
    else:
        context = (lstm_encoder if encoder == "lstm" else gru_encoder)(is_sparse)
        rnn_out = decoder_train(context, is_sparse)
    label = pd.data(name="target_language_next_word", shape=[1], dtype="int64",
                    lod_level=1)
    cost = pd.cross_entropy(input=rnn_out, label=label)
    avg_cost = pd.mean(cost)

    optimizer = fluid.optimizer.Adagrad(
        learning_rate=learning_rate,
        regularization=fluid.regularizer.L2DecayRegularizer(regularization_coeff=1e-4))
    optimizer.minimize(avg_cost)

    train_data = paddle.batch(
        paddle.reader.shuffle(paddle.dataset.wmt14.train(dict_size), buf_size=1000),
        batch_size=batch_size)
    place = fluid.CUDAPlace(0) if use_cuda else fluid.CPUPlace()
    exe = fluid.Executor(place)
    exe.run(fluid.default_startup_program())
    main_program = fluid.default_main_program()
    feed_list = [main_program.global_block().var(var_name) for var_name in FEED_ORDER]
    feeder = fluid.DataFeeder(feed_list, place)

    losses = []
    for _pass_id in range(num_passes):
        for data in train_data():
            outs = exe.run(main_program, feed=feeder.feed(data), fetch_list=[avg_cost])
            avg_cost_val = np.array(outs[0])
            if np.isnan(avg_cost_val).any():
                raise AssertionError("got NaN loss, training failed.")
            losses.append(float(avg_cost_val[0]))
    return losses
