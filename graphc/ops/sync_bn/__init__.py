"""The sync_bn ops: definitions (defs.py) and JAX lowering rules (lowering.py)."""
