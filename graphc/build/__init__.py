"""Program construction beyond the layers: backward, optimizers, initializers, regularizers,
parameter attributes and the AMP user side. Builds IR; never runs it."""
