"""Pass infrastructure: the Pass base and registry, the PassManager, the strategy ->
pipeline order, and helpers shared by passes (control dependencies)."""
