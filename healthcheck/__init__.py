"""The health checker: pure detectors over the sampler's snapshots and the driver's XIDs, a per-GPU
state machine with hysteresis, its persisted store, the checker that runs them, and the health API
(see docs/health.md)."""
