"""The recurrent op (Fluid's StaticRNN): definition (defs.py) and JAX lowering (lowering.py)."""
