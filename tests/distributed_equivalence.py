"""Worker of test_distributed.py's equivalence test (not a test module itself).

``graphc launch --nproc_per_node 2 tests/distributed_equivalence.py OUT_DIR`` trains the same
small MLP (batch norm included) under every configuration in CONFIGS, and Paddle's bow_net
with a sparse embedding under "sparse" (its rows all-gathered across processes), one after
the other in one job (one bootstrap), each rank feeding its contiguous half of every global
batch; every rank writes ``OUT_DIR/<config>.<rank>.npz`` (its per-step loss fetches and the
parameters). The test imports ``build``/``batches``/``strategy`` for the 1-process reference.
"""

from __future__ import annotations

import sys

import numpy as np

import graphc
from graphc import models

STEPS, GLOBAL_BATCH, INPUT_DIM, CLASSES = 4, 16, 8, 4
CONFIGS = {
    "flat": {"fuse_all_reduce_ops": False},
    "bucketed": {"fuse_all_reduce_ops": True, "fuse_grad_size_in_MB": 0.0005},
    "hierarchical": {"fuse_all_reduce_ops": True, "use_hierarchical_allreduce": True,
                     "hierarchical_allreduce_inter_nranks": 2},
    "amp": {"fuse_all_reduce_ops": True, "amp": True},
    "sparse": {"fuse_all_reduce_ops": True},
}
VOCAB, SEQ = 30, 5
SPARSE_GRAD = "embedding_0.w_0@GRAD"


def strategy(config: str):
    s = graphc.DistributedStrategy()
    for name, value in CONFIGS[config].items():
        setattr(s, name, value)
    return s


def build(config: str = "flat"):
    """The config's model (programs, loss): bow_net with is_sparse for "sparse", else the MLP."""
    if config == "sparse":
        return models.bow_net(VOCAB, SEQ, emb_dim=8, hid_dim=16, hid_dim2=8, class_dim=CLASSES)
    return models.mlp(INPUT_DIM, hidden=(16, 16), num_classes=CLASSES, batch_norm=True)


def optimizer():
    return graphc.optimizer.Momentum(learning_rate=0.1, momentum=0.9)


def batches(config: str = "flat") -> list[dict]:
    """Global batches as feed dicts (words repeat within a batch for "sparse")."""
    rng = np.random.RandomState(0)
    label = [rng.randint(0, CLASSES, (GLOBAL_BATCH, 1)).astype("int64") for _ in range(STEPS)]
    if config == "sparse":
        return [{"words": rng.randint(0, VOCAB // 2, (GLOBAL_BATCH, SEQ, 1)).astype("int64"),
                 "label": y} for y in label]
    return [{"x": rng.randn(GLOBAL_BATCH, INPUT_DIM).astype("float32"), "label": y}
            for y in label]


def params(model, scope) -> dict:
    return {p.name: np.asarray(scope[p.name]) for p in model.main.global_block().all_parameters()}


def main(out_dir: str) -> None:
    from graphc.distributed import fleet
    fleet.init(is_collective=True)
    rank, n = fleet.worker_index(), fleet.worker_num()
    per_rank = GLOBAL_BATCH // n
    for config in CONFIGS:
        model = build(config)
        scope = graphc.Scope()
        with graphc.scope_guard(scope), graphc.program_guard(model.main, model.startup):
            opt = fleet.distributed_optimizer(optimizer(), strategy(config))
            opt.minimize(model.loss)
            exe = graphc.Executor(graphc.CPUPlace())
            exe.run(model.startup)
            losses, extra = [], {}
            fetch = [model.loss] + ([SPARSE_GRAD] if config == "sparse" else [])
            for batch in batches(config):
                lo, hi = rank * per_rank, (rank + 1) * per_rank
                loss, *grad = exe.run(fleet.main_program,
                                      feed={k: v[lo:hi] for k, v in batch.items()},
                                      fetch_list=fetch)
                losses.append(np.asarray(loss))
                if grad:  # this rank's devices' part of the fetch, as the dense one it stands for
                    extra = {"fetched_sparse_grad": np.asarray(grad[0]),
                             "fetched_sparse_height": np.asarray(grad[0].height)}
            np.savez(f"{out_dir}/{config}.{rank}.npz", losses=np.stack(losses),
                     **params(model, scope), **extra)
        print(f"{config}: done, losses {[float(np.mean(v)) for v in losses]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
