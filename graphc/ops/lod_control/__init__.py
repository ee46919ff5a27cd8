"""LoD-side ops of Paddle's control-flow programs: lod_reset (and lod_append), the LoD rank
table, max_sequence_len and reorder_lod_tensor_by_rank (docs/control_flow.md)."""
