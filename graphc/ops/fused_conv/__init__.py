"""The fused_conv ops: definitions (defs.py) and JAX lowering rules (lowering.py)."""
