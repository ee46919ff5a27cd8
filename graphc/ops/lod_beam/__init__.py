"""Paddle's LoD beam search: beam_search, one step of a beam search over LoD candidates
(source sentence -> prefixes), as a fixed-capacity op (docs/control_flow.md)."""
