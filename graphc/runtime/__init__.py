"""Running programs: places, scopes, the Executor, checkpoints.

The runtime ties the IR, the passes and the backends together for users.
"""
