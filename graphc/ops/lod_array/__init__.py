"""Paddle's LoD <-> tensor-array ops of DynamicRNN-style programs: lod_tensor_to_array,
array_to_lod_tensor and shrink_rnn_memory (docs/control_flow.md, "LoD values as arrays")."""
