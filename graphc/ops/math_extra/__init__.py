"""The math_extra ops: definitions (defs.py) and JAX lowering rules (lowering.py)."""
