"""``paddle.distributed.fleet.base`` (Paddle 2.0's spelling): ``role_maker``, which the
collective guide imports beside ``paddle.distributed.fleet``."""
