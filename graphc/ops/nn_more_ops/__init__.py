"""Tail of Fluid's nn ops (issue 24): data_norm, spectral_norm, cudnn_lstm, hash, cvm and
filter_by_instag, their definitions in defs.py and JAX rules in the lowering modules."""
