"""The mask-label ops (Mask R-CNN targets from polygon ground truth): definitions (defs.py),
the host rasteriser (raster.py) and the JAX lowering (lowering.py)."""
