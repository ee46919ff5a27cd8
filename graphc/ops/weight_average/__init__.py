"""The weight_average ops: definitions (defs.py) and JAX lowering rules (lowering.py)."""
