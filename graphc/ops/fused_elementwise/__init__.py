"""The fused_elementwise ops: definitions (defs.py) and JAX lowering rules (lowering.py)."""
