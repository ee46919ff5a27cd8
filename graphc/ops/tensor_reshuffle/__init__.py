"""Padding, cropping and element-rearranging ops of issue 24 (pad, crop, pixel_shuffle, ...):
definitions (defs.py) and JAX lowering rules (lowering.py)."""
