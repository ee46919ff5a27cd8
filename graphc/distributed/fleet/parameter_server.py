"""Paddle 2.0's ``fleet`` in parameter-server mode (``fleet.init()``, ``a_sync``): Fluid 1.8's
parameter-server fleet under 2.0's calls, the worker's programs rewritten in place."""

from __future__ import annotations

import logging

from ...ir.program import Block, Program

log = logging.getLogger("graphc.distributed")

# a_sync_configs keys of Paddle 2.0 (distributed_strategy.proto's AsyncConfig): k_steps picks
# the mode; the communicator's queue and thread settings do not change how graphc sends
A_SYNC_KEYS = {"k_steps", "max_merge_var_num", "send_queue_size", "independent_recv_thread",
               "min_send_grad_num_before_recv", "thread_pool_size", "send_wait_times",
               "runtime_split_send_recv", "launch_barrier", "heter_worker_device_guard",
               "lr_decay_steps", "use_ps_gpu"}


def transpiler_strategy(strategy, error):
    """The Fluid 1.8 strategy 2.0's ``a_sync`` / ``a_sync_configs`` stand for: a_sync off:
    sync; on with ``k_steps`` > 0: GEO pushing every k steps; else async (2.0's rule)."""
    from ...fluid.incubate.fleet.parameter_server.distribute_transpiler import StrategyFactory
    configs = dict(strategy.a_sync_configs)
    unknown = sorted(set(configs) - A_SYNC_KEYS)
    if unknown:
        raise error(f"a_sync_configs: unknown key(s) {unknown}; Paddle 2.0's are "
                    f"{sorted(A_SYNC_KEYS)}")
    if configs.get("use_ps_gpu"):
        raise error("a_sync_configs: use_ps_gpu is not supported")
    try:
        k_steps = int(configs.get("k_steps", -1))
    except (TypeError, ValueError):
        raise error(f"a_sync_configs['k_steps'] must be an int, got "
                    f"{configs['k_steps']!r}") from None
    ignored = sorted(set(configs) - {"k_steps", "use_ps_gpu"})
    if ignored:
        log.warning("a_sync_configs %s: no effect in graphc (its trainers send one packed "
                    "buffer per server per step)", ignored)
    if not strategy.a_sync:
        if k_steps > 0:
            raise error(f"a_sync_configs k_steps={k_steps} (GEO) needs a_sync = True")
        return StrategyFactory.create_sync_strategy()
    if k_steps > 0:
        return StrategyFactory.create_geo_strategy(k_steps)
    return StrategyFactory.create_async_strategy()


def adopt(target: Program, source: Program) -> None:
    """``target`` becomes ``source`` (its blocks move over), as 2.0 rewrites the user's
    programs in place; ``source`` is left empty."""
    target.blocks, source.blocks = source.blocks, [Block(source, 0)]
    for block in target.blocks:
        block.program = target
    target._bump()
    source._bump()


class ParameterServerOptimizer:
    """``minimize``: the 1.8 fleet's transpile for this process's role; on a worker the
    program and startup program the user runs become the trainer's (a server runs its own
    in ``init_server`` / ``run_server``)."""

    def __init__(self, ps_fleet, inner):
        self._fleet, self._inner = ps_fleet, inner

    def minimize(self, loss, startup_program=None, parameter_list=None, no_grad_set=None):
        from ...ir.default_programs import default_startup_program
        main = loss.block.program
        startup = startup_program or default_startup_program()
        result = self._inner.minimize(loss, startup, parameter_list, no_grad_set)
        if self._fleet.is_worker():
            # the exported model is the program as built (before the trainer's send/recv)
            self._fleet._origin_main = main.clone()
            adopt(main, self._fleet.main_program)
            adopt(startup, self._fleet.startup_program)
            self._fleet.main_program, self._fleet.startup_program = main, startup
        return result

    def __getattr__(self, name):
        return getattr(self._inner, name)
