"""Automatic mixed precision, user side: ``init_state`` puts the loss-scaling state the
``amp`` pass uses into a startup program, so ``exe.run(startup)`` initialises it.

Usage (single process)::

    bs = graphc.BuildStrategy(amp=True, amp_configs={"init_loss_scaling": 1024.0})
    graphc.amp.init_state(startup, bs)          # before exe.run(startup)
    exe.run(startup)
    exe.run(graphc.CompiledProgram(main, build_strategy=bs), feed=...,
            fetch_list=[loss, "loss_scaling", "found_infinite"])

The names and types of the state are in ``graphc.ops.amp.defs``; the ``amp`` pass
(``graphc/passes/amp.py``) documents what it does with them.
"""

from __future__ import annotations

from ..ir.default_programs import default_startup_program
from ..ir.errors import ProgramError
from ..ir.program import Program
from ..ops.amp.defs import BAD_STEPS, GOOD_STEPS, LOSS_SCALING, STATE_TYPES
from ..strategy import AmpConfigs, BuildStrategy

__all__ = ["init_state"]


def init_state(startup_program: Program | None = None,
               configs: AmpConfigs | BuildStrategy | None = None) -> None:
    """Append fill_constant initialisers of ``loss_scaling`` (``init_loss_scaling``),
    ``num_good_steps`` and ``num_bad_steps`` (0) to the startup program (default: the
    default startup program). Variables it already initialises are left as they are."""
    startup = default_startup_program() if startup_program is None else startup_program
    if not isinstance(startup, Program):
        raise ProgramError(f"init_state expects a startup Program, got "
                           f"{type(startup).__name__}")
    if isinstance(configs, BuildStrategy):
        configs = configs.amp_configs
    configs = configs or AmpConfigs()
    if not isinstance(configs, AmpConfigs):
        raise ProgramError(f"init_state expects AmpConfigs or a BuildStrategy, got "
                           f"{type(configs).__name__}")
    block = startup.global_block()
    values = {LOSS_SCALING: configs.init_loss_scaling, GOOD_STEPS: 0.0, BAD_STEPS: 0.0}
    for name, value in values.items():
        if block.has_var(name):
            continue
        t = STATE_TYPES[name]
        var = block.create_var(name, list(t.shape), t.dtype, persistable=True,
                               stop_gradient=True)
        block.append_op("fill_constant", outputs={"Out": var},
                        attrs={"shape": list(t.shape), "dtype": t.dtype, "value": value})
