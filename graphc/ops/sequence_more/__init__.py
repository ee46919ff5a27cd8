"""The sequence_more ops: definitions (defs.py) and JAX lowering rules (lowering.py)."""
