"""The tree-based deep model (TDM) ops of Paddle 1.8's fluid.contrib.layers, with index_sample:
definitions (defs.py) and JAX lowering rules (lowering.py)."""
