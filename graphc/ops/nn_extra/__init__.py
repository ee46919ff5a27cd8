"""Further nn ops of fluid.layers (issue 24): hierarchical sigmoid, row_conv, fsp_matrix,
add_position_encoding, affine_grid and grid_sampler, with Paddle 1.8's slots."""
