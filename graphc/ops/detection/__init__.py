"""Detection ops of Paddle 1.8 (fluid/layers/detection.py): priors and anchors, box coding,
IoU and matching, YOLO boxes, RoI align/pool and multi-class NMS."""
