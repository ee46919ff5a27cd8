"""The beam ops (decoding helpers outside control flow): definitions (defs.py) and JAX
lowering rules (lowering.py)."""
