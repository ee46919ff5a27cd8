"""Paddle's ``fluid.io`` spellings: save/load persistables (safetensors checkpoints).

See graphc.runtime.checkpoint for the format and its guarantees.
"""

from .runtime.checkpoint import (  # noqa: F401
    CheckpointError,
    load,
    load_persistables,
    save,
    save_persistables,
)
