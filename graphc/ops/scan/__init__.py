"""The scan ops: definitions (defs.py) and JAX lowering rules (lowering.py)."""
