"""The detection evaluation ops (``detection_map``): definitions (defs.py) and JAX lowering
rules (lowering.py)."""
