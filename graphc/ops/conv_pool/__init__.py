"""N-d convolution and pooling ops beyond nn's 2-D ones: transposed convolutions, conv3d,
pool3d (Paddle 1.8's slots, attributes and output-size rules)."""
