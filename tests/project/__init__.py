"""The project: docs, README, demo, packaging, the public surface, scripts, benchmarks,
the format contract."""
