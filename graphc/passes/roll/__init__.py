"""Repeated layers as one lax.scan: the roll-repeated-layers pass and the stacked-state
bookkeeping it shares with the runtime."""
