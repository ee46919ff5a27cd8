"""Conditional constructs as ops holding their branches as regions: cond, case, switch_case
(one branch taken, lax.cond/lax.switch) and ifelse (every row through its own branch)."""
