"""Assorted nn ops of Fluid 1.8: temporal_shift (video models), unfold (im2col) and
bilinear_tensor_product."""
