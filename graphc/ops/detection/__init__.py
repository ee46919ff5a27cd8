"""Detection ops of Paddle 1.8 (fluid/layers/detection.py): prior boxes, box coding,
IoU and the YOLO box decoder."""
