"""The lr_schedule ops: definitions (defs.py) and JAX lowering rules (lowering.py)."""
