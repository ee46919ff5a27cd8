"""More losses of fluid.layers (issue 24): sigmoid focal, teacher-student sigmoid, center,
n-pair losses, mean IoU and edit distance, with Paddle 1.8's slots and attributes."""
