"""The fused_bn ops: definitions (defs.py) and JAX lowering rules (lowering.py)."""
