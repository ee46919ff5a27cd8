"""The adaptive_optimizer ops: definitions (defs.py) and JAX lowering rules (lowering.py)."""
