"""Creation, random and index ops of issue 24 (linspace, eye, diag, unique, sampling_id, ...):
definitions (defs.py) and JAX lowering rules (lowering.py)."""
