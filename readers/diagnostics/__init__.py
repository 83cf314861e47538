"""What `pack bench`, `pack tune` and `pack profile` run: loader sweeps, the tuner, the
per-stage profile, plots. Imported by the CLI on demand, never by the datasets."""
