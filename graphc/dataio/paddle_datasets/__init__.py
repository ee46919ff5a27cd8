"""Paddle 1.8's download datasets (``paddle.dataset.mnist``, ``.cifar``, ...), one module each,
reading the files Paddle's cache already holds in their real formats; nothing is downloaded."""
