"""Runtime Kit: one asyncio agent per GPU node — exporter, health checker and slicer."""

__version__ = "0.1.0"
