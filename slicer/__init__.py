"""The slicer: compute and memory slices, MIG and time-sharing, topology-aware placement (not built yet)."""
