"""``fluid.clip``: gradient clipping by value, by norm and by global norm (Paddle 1.8's API),
appended to the program as ops between backward and the optimizer."""
