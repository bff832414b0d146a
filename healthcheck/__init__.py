"""The health checker: fault detectors over the sampler's snapshots (not built yet)."""
