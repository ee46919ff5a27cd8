"""Book chapter 05, recommender_system, written for graphc's tests in Paddle Fluid 1.8
spelling: user and movie towers (embeddings, fc, the title's sequence_conv_pool, the
categories' sequence_pool) scored by cos_sim, trained on movielens, saved and inferred."""

import math

import numpy as np
import paddle
import paddle.fluid as fluid
import paddle.fluid.layers as layers
import paddle.fluid.nets as nets

IS_SPARSE = True
BATCH_SIZE = 16
EMB = 8
HIDDEN = 16
USR_DICT_SIZE = paddle.dataset.movielens.max_user_id() + 1
MOV_DICT_SIZE = paddle.dataset.movielens.max_movie_id() + 1
USR_JOB_DICT_SIZE = paddle.dataset.movielens.max_job_id() + 1
USR_AGE_DICT_SIZE = len(paddle.dataset.movielens.age_table)
CATEGORY_DICT_SIZE = len(paddle.dataset.movielens.movie_categories())
MOV_TITLE_DICT_SIZE = len(paddle.dataset.movielens.get_movie_title_dict())
FEED_ORDER = ["user_id", "gender_id", "age_id", "job_id", "movie_id", "category_id",
              "movie_title", "score"]


def id_feature(name, dict_size, table):
    ids = layers.data(name=name, shape=[1], dtype="int64")
    emb = layers.embedding(input=ids, dtype="float32", size=[dict_size, EMB],
                           param_attr=table, is_sparse=IS_SPARSE)
    return layers.fc(input=emb, size=EMB)


def get_usr_combined_features():
    usr_fc = id_feature("user_id", USR_DICT_SIZE, "user_table")
    gender_fc = id_feature("gender_id", 2, "gender_table")
    age_fc = id_feature("age_id", USR_AGE_DICT_SIZE, "age_table")
    job_fc = id_feature("job_id", USR_JOB_DICT_SIZE, "job_table")
    concat_embed = layers.concat(input=[usr_fc, gender_fc, age_fc, job_fc], axis=1)
    return layers.fc(input=concat_embed, size=HIDDEN, act="tanh")


def get_mov_combined_features():
    mov_fc = id_feature("movie_id", MOV_DICT_SIZE, "movie_table")
    category_id = layers.data(name="category_id", shape=[1], dtype="int64", lod_level=1)
    mov_categories_emb = layers.embedding(input=category_id, size=[CATEGORY_DICT_SIZE, EMB],
                                          is_sparse=IS_SPARSE)
    mov_categories_hidden = layers.sequence_pool(input=mov_categories_emb, pool_type="sum")
    mov_title_id = layers.data(name="movie_title", shape=[1], dtype="int64", lod_level=1)
    mov_title_emb = layers.embedding(input=mov_title_id, size=[MOV_TITLE_DICT_SIZE, EMB],
                                     is_sparse=IS_SPARSE)
    mov_title_conv = nets.sequence_conv_pool(input=mov_title_emb, num_filters=EMB,
                                             filter_size=3, act="tanh", pool_type="sum")
    concat_embed = layers.concat(input=[mov_fc, mov_categories_hidden, mov_title_conv],
                                 axis=1)
    return layers.fc(input=concat_embed, size=HIDDEN, act="tanh")


def model():
    usr_combined_features = get_usr_combined_features()
    mov_combined_features = get_mov_combined_features()
    inference = layers.cos_sim(X=usr_combined_features, Y=mov_combined_features)
    scale_infer = layers.scale(x=inference, scale=5.0)
    label = layers.data(name="score", shape=[1], dtype="float32")
    square_cost = layers.square_error_cost(input=scale_infer, label=label)
    avg_cost = layers.mean(square_cost)
    return scale_infer, avg_cost


def train(use_cuda, save_dirname, num_passes=4, learning_rate=0.2):
    scale_infer, avg_cost = model()
    test_program = fluid.default_main_program().clone(for_test=True)
    sgd_optimizer = fluid.optimizer.SGD(learning_rate=learning_rate)
    sgd_optimizer.minimize(avg_cost)

    place = fluid.CUDAPlace(0) if use_cuda else fluid.CPUPlace()
    exe = fluid.Executor(place)
    train_reader = paddle.batch(
        paddle.reader.shuffle(paddle.dataset.movielens.train(), buf_size=8192),
        batch_size=BATCH_SIZE)
    test_reader = paddle.batch(paddle.dataset.movielens.test(), batch_size=BATCH_SIZE)
    feed_list = [fluid.default_main_program().global_block().var(name) for name in FEED_ORDER]
    feeder = fluid.DataFeeder(feed_list, place)
    exe.run(fluid.default_startup_program())

    losses, test_losses = [], []
    for _pass_id in range(num_passes):
        for data in train_reader():
            outs = exe.run(program=fluid.default_main_program(), feed=feeder.feed(data),
                           fetch_list=[avg_cost])
            out = np.array(outs[0])
            if math.isnan(float(out[0])):
                raise AssertionError("got NaN loss, training failed.")
            losses.append(float(out[0]))
        costs = [float(np.array(exe.run(test_program, feed=feeder.feed(data),
                                        fetch_list=[avg_cost])[0])[0])
                 for data in test_reader()]
        test_losses.append(float(np.mean(costs)))
    fluid.io.save_inference_model(save_dirname, FEED_ORDER[:-1], [scale_infer], exe)
    return losses, test_losses


def infer(use_cuda, save_dirname, sample):
    """One user and one movie, fed as Paddle's test feeds them: every input a LoDTensor of
    one sequence (one id each, the categories and the title's words)."""
    place = fluid.CUDAPlace(0) if use_cuda else fluid.CPUPlace()
    exe = fluid.Executor(place)
    inference_scope = fluid.core.Scope()
    with fluid.scope_guard(inference_scope):
        [inference_program, feed_target_names, fetch_targets] = (
            fluid.io.load_inference_model(save_dirname, exe))
        feed = {}
        for name, value in zip(FEED_ORDER[:-1], sample):
            value = [int(v) for v in value] if isinstance(value, list) else [int(value)]
            feed[name] = fluid.create_lod_tensor([value], [[len(value)]], place)
        results = exe.run(inference_program, feed=feed, fetch_list=fetch_targets,
                          return_numpy=False)
    return feed_target_names, np.array(results[0])
