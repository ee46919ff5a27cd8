"""Tools around the library: the `graphc` command, the demo, generated docs, graph
drawing, the shared example models and strategy presets."""
