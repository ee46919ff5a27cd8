"""Deep gradient compression (Paddle's DGCMomentumOptimizer): the ``dgc_momentum`` op, momentum
before ``rampup_begin_step`` and top-k sparsified momentum-corrected updates after."""
