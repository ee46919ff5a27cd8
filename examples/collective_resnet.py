"""The seeds' fleet collective ResNet example (example_collective.py), line by line, on graphc.

Only the imports changed (``import graphc as fluid``, ``from graphc.distributed import fleet``)
and fleetx's pieces are stood in for by the small ``X`` below: a tiny ResNet-18 from
``graphc.models`` and a synthetic in-memory loader instead of the download and the DALI
reader (no network). On a machine without a GPU the executor's place is the CPU.

    CPU_NUM=2 graphc launch --nproc_per_node 2 examples/collective_resnet.py --steps 4

prints, from every rank, the seed's line
``worker_index: 0, step0 cost = 2.312806, speed: 34.481360``.
"""

import argparse
import os
import time

import numpy as np

import graphc as fluid
from graphc.distributed import fleet


class X:
    """What the seed takes from fleetx (``import fleetx as X``), scaled down for a CPU."""

    @staticmethod
    def parse_train_configs():
        p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
        p.add_argument("--steps", type=int, default=10, help="batches per rank")
        p.add_argument("--image_size", type=int, default=16)
        p.add_argument("--base_width", type=int, default=8, help="ResNet's first stage width")
        p.add_argument("--num_classes", type=int, default=10)
        p.add_argument("--no_amp", action="store_true", help="train in float32")
        p.add_argument("--strategy_out", default="dist_strategy.prototxt")
        return p.parse_args()

    class applications:
        class Resnet50:
            """fleetx's model object (``.loss``, ``.main_prog``, a train loader); here a
            ResNet-18 of ``base_width`` channels, built into the default programs as
            fleetx's models are."""

            def __init__(self, image_size=16, base_width=8, num_classes=10):
                from graphc.models import resnet

                from graphc.ir.default_programs import switch_main_program, switch_startup_program
                self.image_size, self.num_classes = image_size, num_classes
                m = resnet(18, num_classes, (3, image_size, image_size),
                           base_width=base_width)
                switch_main_program(m.main)
                switch_startup_program(m.startup)
                self.main_prog, self.startup_prog = m.main, m.startup
                self.inputs, self.loss = m.feeds, m.loss

            def get_train_dataloader(self, local_path, batch_size, steps=10):
                """Synthetic images and labels, a different stream on every rank (each rank
                feeds its own shard, as with a real sharded reader); every rank yields the
                same number of batches, so no rank waits for a batch another never sends."""
                rng = np.random.RandomState(1234 + fleet.worker_index())

                def loader():
                    for _ in range(steps):
                        image = rng.randn(batch_size, 3, self.image_size,
                                          self.image_size).astype("float32")
                        label = rng.randint(0, self.num_classes,
                                            (batch_size, 1)).astype("int64")
                        yield {"image": image, "label": label}
                return loader

    class utils:
        class Downloader:
            def download_from_bos(self, fs_yaml, local_path):
                return local_path  # the data is synthetic: nothing to download


# -- the seed, from here on -------------------------------------------------------------
# paddle.enable_static()  (graphc programs are always static)
configs = X.parse_train_configs()
fleet.init(is_collective=True)

model = X.applications.Resnet50(configs.image_size, configs.base_width, configs.num_classes)
downloader = X.utils.Downloader()
local_path = downloader.download_from_bos(
    fs_yaml='https://fleet.bj.bcebos.com/test/loader/small_imagenet.yaml',
    local_path='./data')
batch_size = 32
loader = model.get_train_dataloader(local_path, batch_size=batch_size, steps=configs.steps)

dist_strategy = fleet.DistributedStrategy()

# distributed strategy
dist_strategy.sync_nccl_allreduce = True
dist_strategy.nccl_comm_num = 2
dist_strategy.fuse_all_reduce_ops = True

# build strategy
build_strategy = fluid.BuildStrategy()
build_strategy.enable_sequential_execution = True
build_strategy.fuse_elewise_add_act_ops = True
build_strategy.fuse_bn_act_ops = True
build_strategy.enable_auto_fusion = True
build_strategy.fuse_all_optimizer_ops = True
dist_strategy.build_strategy = build_strategy


# execute strategy
execution_strategy = fluid.ExecutionStrategy()
execution_strategy.num_threads = 3
execution_strategy.num_iteration_per_drop_scope = 100
execution_strategy.num_iteration_per_run = 1
dist_strategy.execution_strategy = execution_strategy

# amp
dist_strategy.amp = not configs.no_amp
dist_strategy.amp_configs = {
    "init_loss_scaling": 128,
    "decr_every_n_nan_or_inf": 2,
    "incr_every_n_steps": 1000,
    "incr_ratio": 2.0,
    "use_dynamic_loss_scaling": True,
    "decr_ratio": 0.5,
    "custom_white_list": [],
    "custom_black_list": [],
}

dist_strategy.save_to_prototxt(configs.strategy_out)

optimizer = fluid.optimizer.Momentum(learning_rate=0.01, momentum=0.9)
optimizer = fleet.distributed_optimizer(optimizer, dist_strategy)
optimizer.minimize(model.loss)

place = (fluid.CUDAPlace(int(os.environ.get('FLAGS_selected_gpus', 0)))
         if fluid.is_compiled_with_cuda() else fluid.CPUPlace())
exe = fluid.Executor(place)
exe.run(fluid.default_startup_program())

for i, data in enumerate(loader()):
    start_time = time.time()
    cost_val = exe.run(model.main_prog,
                       feed=data,
                       fetch_list=[model.loss.name])

    end_time = time.time()
    print(
        "worker_index: %d, step%d cost = %f, speed: %f"  # noqa: UP031
        % (fleet.worker_index(), i, np.mean(cost_val[0]), batch_size / (end_time - start_time)))
