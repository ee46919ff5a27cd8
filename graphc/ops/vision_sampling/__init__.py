"""Ops that sample feature maps at computed points: position-sensitive and precise RoI pooling,
deformable convolution and RoI pooling, RoI perspective transform, im2sequence."""
