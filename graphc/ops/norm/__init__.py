"""Normalisation ops beyond batch/layer norm: instance_norm, group_norm, lrn and
affine_channel (Paddle 1.8's slots, attributes and statistics outputs)."""
