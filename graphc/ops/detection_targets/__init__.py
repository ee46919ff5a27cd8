"""Detection training-target ops of Paddle 1.8 (fluid/layers/detection.py): the YOLOv3 loss,
SSD's hard-example mining, and the RPN / RetinaNet anchor target assignment."""
