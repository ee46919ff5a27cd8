"""Control flow: the ``while`` loop (its body a region) and tensor arrays; definitions in
defs.py and arrays.py, JAX rules in lowering.py (docs/control_flow.md)."""
