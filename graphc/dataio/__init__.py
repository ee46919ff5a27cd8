"""Data in and out of programs: DataLoader/PyReader (io, loader_epoch), datasets (MultiSlot
files) and the saving formats (persistables, inference models)."""
