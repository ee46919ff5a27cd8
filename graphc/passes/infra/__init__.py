"""Pass infrastructure: the Pass base and registry, the PassManager, the strategy ->
pipeline order, the pattern layer (pattern, guards, driver, rewrite) and analyses and edits
shared by passes (control dependencies, fusion cycles, gradient buckets)."""
