"""Paddle 1.x's file formats: the LoDTensor stream of saved variables (tensor_stream) and the
ProgramDesc protobuf of ``__model__`` (program_desc, schema declared in schema.py)."""
