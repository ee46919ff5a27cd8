"""The parameter-server transpile as passes: the plan (which server holds what), variable
slicing, and the trainer, server and GEO graphs and startups built from it."""
