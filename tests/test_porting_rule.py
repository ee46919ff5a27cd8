"""The porting rule (docs/porting_from_paddle.md): a Fluid 1.x script runs on graphc once
``paddle`` is replaced by ``graphc`` in its import lines. Applied to the doc's example and to
Fluid-1.x-style programs written for these tests, which must train (the loss falls)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from porting import port, run_ported

DOC = Path(__file__).resolve().parent.parent / "docs" / "porting_from_paddle.md"


def test_port_changes_import_lines_only():
    script = ("import paddle\nimport paddle.fluid as fluid\n"
              "from paddle.fluid.incubate.fleet.base import role_maker\n"
              "x = paddle.batch(r, 2)  # paddle stays paddle in code\n")
    assert port(script) == ("import graphc as paddle\nimport graphc.fluid as fluid\n"
                            "from graphc.fluid.incubate.fleet.base import role_maker\n"
                            "x = paddle.batch(r, 2)  # paddle stays paddle in code\n")


def test_the_docs_example_runs_through_the_porting_rule():
    blocks = re.findall(r"```python paddle-example\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 1, "docs/porting_from_paddle.md must keep one paddle-example block"
    assert "import paddle.fluid as fluid" in blocks[0]
    ns = run_ported(blocks[0], "porting_doc_example")
    assert ns["last_epoch"] < ns["first_epoch"] / 3


RECOGNIZE_DIGITS = '''
import numpy as np
import paddle
import paddle.fluid as fluid
from paddle.fluid.layers import device

def conv_net(img, label):
    pool = fluid.nets.simple_img_conv_pool(input=img, filter_size=3, num_filters=4,
                                           pool_size=2, pool_stride=2, act="relu")
    pool = fluid.layers.batch_norm(pool)
    prediction = fluid.layers.fc(input=pool, size=3, act="softmax")
    loss = fluid.layers.cross_entropy(input=prediction, label=label)
    return prediction, fluid.layers.mean(loss)

main, startup = fluid.Program(), fluid.Program()
with fluid.program_guard(main, startup), fluid.unique_name.guard():
    img = fluid.layers.data(name="img", shape=[1, 8, 8], dtype="float32")
    label = fluid.layers.data(name="label", shape=[1], dtype="int64")
    prediction, avg_loss = conv_net(img, label)
    acc = fluid.layers.accuracy(input=prediction, label=label)
    test_program = main.clone(for_test=True)
    fluid.optimizer.AdamOptimizer(learning_rate=0.01).minimize(avg_loss)

rng = np.random.RandomState(1)
def reader():
    for _ in range(96):
        k = rng.randint(3)
        image = rng.normal(0, 0.3, (1, 8, 8)).astype("float32")
        image[0, 2 * k:2 * k + 3, :] += 1.0  # the class is where the bright rows are
        yield image, k

places = device.get_places(device_type="CPU")
feeder = fluid.DataFeeder(feed_list=[img, label], place=places[0])
exe = fluid.Executor(places[0])
exe.run(startup)
losses = []
for epoch in range(3):
    for data in paddle.batch(reader, batch_size=16)():
        loss_v, acc_v = exe.run(main, feed=feeder.feed(data), fetch_list=[avg_loss, acc])
        losses.append(float(loss_v[0]))
test_acc, = exe.run(test_program, feed=feeder.feed(list(reader())[:32]), fetch_list=[acc])
'''


def test_recognize_digits_style_program_trains():
    ns = run_ported(RECOGNIZE_DIGITS, "recognize_digits")
    losses = ns["losses"]
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3 * 0.7, losses
    assert float(ns["test_acc"][0]) > 0.5


WORD2VEC_STYLE = '''
import numpy as np
import paddle
import paddle.fluid as fluid
import paddle.fluid.core as core

VOCAB, EMB = 12, 8
main, startup = fluid.Program(), fluid.Program()
with fluid.program_guard(main, startup), fluid.unique_name.guard():
    words = [fluid.data(name="w%d" % i, shape=[-1, 1], dtype="int64") for i in range(3)]
    nxt = fluid.data(name="next", shape=[-1, 1], dtype="int64")
    embs = [fluid.layers.embedding(input=w, size=[VOCAB, EMB], dtype="float32")
            for w in words]
    hidden = fluid.layers.fc(input=fluid.layers.concat(input=embs, axis=1), size=16,
                             act="sigmoid")
    predict = fluid.layers.fc(input=hidden, size=VOCAB, act="softmax")
    cost = fluid.layers.mean(fluid.layers.cross_entropy(input=predict, label=nxt))
    fluid.optimizer.MomentumOptimizer(learning_rate=0.5, momentum=0.9).minimize(cost)
    loader = fluid.io.DataLoader.from_generator(feed_list=words + [nxt], capacity=4,
                                                iterable=False)

def sentences():
    for start in range(40):
        seq = [(start + i) % VOCAB for i in range(4)]  # next word = previous + 1
        yield [np.array([t], dtype="int64") for t in seq]

loader.set_sample_generator(sentences, batch_size=8, drop_last=True)
exe = fluid.Executor(fluid.CPUPlace())
exe.run(startup)
losses = []
for epoch in range(6):
    loader.start()
    try:
        while True:
            (v,) = exe.run(main, fetch_list=[cost])
            losses.append(float(v[0]))
    except core.EOFException:
        loader.reset()
'''


def test_word2vec_style_program_with_a_non_iterable_loader_trains():
    losses = run_ported(WORD2VEC_STYLE, "word2vec_style")["losses"]
    assert len(losses) == 6 * 5
    assert sum(losses[-5:]) < sum(losses[:5]) * 0.7, losses


DATA_PARALLEL_FIT_A_LINE = '''
import numpy as np
import paddle
import paddle.fluid as fluid
from paddle.fluid import compiler
from paddle.fluid.incubate.fleet.base import role_maker
from paddle.fluid.incubate.fleet.collective import fleet, DistributedStrategy

fluid.require_version("1.6.0")
role = role_maker.PaddleCloudRoleMaker(is_collective=True)
assert role.worker_num() == 1 and not fluid.in_dygraph_mode()

main, startup = fluid.Program(), fluid.Program()
with fluid.program_guard(main, startup), fluid.unique_name.guard():
    x = fluid.layers.data(name="x", shape=[4], dtype="float32")
    y = fluid.layers.data(name="y", shape=[1], dtype="float32")
    with fluid.name_scope("regression"):
        pred = fluid.layers.fc(input=x, size=1,
                               param_attr=fluid.ParamAttr(
                                   initializer=fluid.initializer.ConstantInitializer(0.0)))
    loss = fluid.layers.mean(fluid.layers.square_error_cost(input=pred, label=y))
    fluid.optimizer.SGD(learning_rate=0.1).minimize(loss)

build_strategy = fluid.BuildStrategy()
build_strategy.fuse_all_reduce_ops = True
exec_strategy = fluid.ExecutionStrategy()
exec_strategy.num_threads = 2
places = fluid.cpu_places(2)
train = compiler.CompiledProgram(main).with_data_parallel(
    loss_name=loss.name, build_strategy=build_strategy, exec_strategy=exec_strategy,
    places=places)

w = np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")
batches = paddle.batch(paddle.reader.firstn(
    lambda: ((v, v @ w) for v in np.random.RandomState(2).rand(400, 4).astype("float32")),
    64), batch_size=8)
exe = fluid.Executor(places[0])
exe.run(startup)
losses = []
for epoch in range(4):
    for data in batches():
        feed = {"x": np.stack([d[0] for d in data]), "y": np.stack([d[1] for d in data])}
        (v,) = exe.run(train, feed=feed, fetch_list=[loss.name])
        losses.append(float(np.mean(v)))
'''


def test_data_parallel_program_with_fleet_import_paths_trains():
    losses = run_ported(DATA_PARALLEL_FIT_A_LINE, "fit_a_line_dp")["losses"]
    assert losses[-1] < losses[0] / 4, losses


def test_a_script_reaching_a_missing_api_gets_advice():
    script = ("import paddle.fluid as fluid\n"
              "with fluid.dygraph.guard():\n    pass\n")
    from graphc.fluid import MissingAPIError
    with pytest.raises(MissingAPIError, match="static programs only"):
        run_ported(script, "dygraph_script")


INCUBATE_FLEET = '''
import numpy as np
import paddle.fluid as fluid
from paddle.fluid.incubate.fleet.base import role_maker
from paddle.fluid.incubate.fleet.collective import fleet, DistributedStrategy

role = role_maker.PaddleCloudRoleMaker(is_collective=True)
fleet.init(role)
main, startup = fluid.Program(), fluid.Program()
with fluid.program_guard(main, startup), fluid.unique_name.guard():
    x = fluid.layers.data(name="x", shape=[3], dtype="float32")
    y = fluid.layers.data(name="y", shape=[1], dtype="float32")
    loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(x, 1), y))
    dist_strategy = DistributedStrategy()
    dist_strategy.mode = "collective"
    dist_strategy.collective_mode = "grad_allreduce"
    dist_strategy.fuse_all_reduce_ops = True
    dist_strategy.fuse_elewise_add_act_ops = True  # a BuildStrategy field, as in Paddle 1.8
    dist_strategy.exec_strategy = fluid.ExecutionStrategy()
    optimizer = fleet.distributed_optimizer(fluid.optimizer.SGD(learning_rate=0.2),
                                            strategy=dist_strategy)
    optimizer.minimize(loss)

exe = fluid.Executor(fluid.CPUPlace())
exe.run(fleet.startup_program)
rng = np.random.RandomState(4)
losses = []
for step in range(30):
    xs = rng.rand(16, 3).astype("float32")
    (v,) = exe.run(fleet.main_program, feed={"x": xs, "y": xs.sum(1, keepdims=True)},
                   fetch_list=[loss])
    losses.append(float(np.mean(v)))
'''


@pytest.fixture
def fleet_state_restored():
    from graphc.distributed import fleet
    saved = dict(fleet._FLEET)
    yield
    fleet._FLEET.clear()
    fleet._FLEET.update(saved)


def test_incubate_fleet_collective_script_trains(fleet_state_restored):
    ns = run_ported(INCUBATE_FLEET, "incubate_fleet")
    losses = ns["losses"]
    assert losses[-1] < losses[0] / 4, losses
    strategy = ns["dist_strategy"]
    assert strategy.build_strategy.fuse_elewise_add_act_ops is True
    assert strategy.to_build_strategy().fuse_all_reduce_ops is True
    assert (strategy.mode, strategy.collective_mode) == ("collective", "grad_allreduce")


IMAGE_CLASSIFICATION = '''
import os
import numpy as np
import paddle
import paddle.fluid as fluid

def vgg_like(input):
    def conv_block(ipt, num_filter, groups, dropouts):
        return fluid.nets.img_conv_group(
            input=ipt, pool_size=2, pool_stride=2, conv_num_filter=[num_filter] * groups,
            conv_filter_size=3, conv_act="relu", conv_with_batchnorm=True,
            conv_batchnorm_drop_rate=dropouts, pool_type="max")
    conv1 = conv_block(input, 4, 2, [0.1, 0])
    conv2 = conv_block(conv1, 8, 1, [0])
    fc1 = fluid.layers.fc(input=fluid.layers.dropout(x=conv2, dropout_prob=0.2), size=16,
                          act="relu")
    return fluid.layers.fc(input=fc1, size=2, act="softmax")

main, startup = fluid.Program(), fluid.Program()
main.random_seed = startup.random_seed = 3
with fluid.program_guard(main, startup), fluid.unique_name.guard():
    images = fluid.layers.data(name="pixel", shape=[3, 8, 8], dtype="float32")
    label = fluid.layers.data(name="label", shape=[1], dtype="int64")
    predict = vgg_like(images)
    avg_cost = fluid.layers.mean(fluid.layers.cross_entropy(input=predict, label=label))
    acc = fluid.layers.accuracy(input=predict, label=label)
    test_program = main.clone(for_test=True)
    fluid.optimizer.Momentum(learning_rate=0.05, momentum=0.9).minimize(avg_cost)

rng = np.random.RandomState(5)
def reader():
    for _ in range(64):
        k = rng.randint(2)
        img = rng.normal(0, 0.5, (3, 8, 8)).astype("float32")
        img[k] += 1.0  # class k: channel k is brighter
        yield img, k

place = fluid.CPUPlace()
exe = fluid.Executor(place)
exe.run(startup)
feeder = fluid.DataFeeder(place=place, feed_list=[images, label])
losses = []
for pass_id in range(4):
    for data in paddle.batch(paddle.reader.shuffle(reader, 32), batch_size=16)():
        loss_v, acc_v = exe.run(main, feed=feeder.feed(data), fetch_list=[avg_cost, acc])
        losses.append(float(loss_v[0]))

fluid.io.save_inference_model(SAVE_DIR, ["pixel"], [predict], exe, main_program=main)
probe = [s for s, _ in zip(reader(), range(8))]
expected, = exe.run(test_program, feed=feeder.feed(probe), fetch_list=[predict])
[inference_program, feed_names, fetch_targets] = fluid.io.load_inference_model(SAVE_DIR, exe)
got, = exe.run(inference_program, feed={feed_names[0]: np.stack([s[0] for s in probe])},
               fetch_list=fetch_targets)
'''


def test_image_classification_style_program_trains_and_exports(tmp_path):
    script = IMAGE_CLASSIFICATION.replace("SAVE_DIR", repr(str(tmp_path / "model")))
    ns = run_ported(script, "image_classification")
    losses = ns["losses"]
    assert sum(losses[-4:]) < sum(losses[:4]) * 0.7, losses
    assert ns["feed_names"] == ["pixel"]
    import numpy as np
    np.testing.assert_allclose(ns["got"], ns["expected"], rtol=1e-5, atol=1e-6)
