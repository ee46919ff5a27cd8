"""Backends: op lowering rules (JAX), the op-by-op reference interpreter, and the
whole-graph JAX/XLA emitter. Backends import ``graphc.ir`` only, never passes."""
