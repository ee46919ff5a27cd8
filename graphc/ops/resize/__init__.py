"""Image resizing ops: bilinear_interp, nearest_interp, trilinear_interp (Paddle 1.8's
align_corners / align_mode index rules)."""
