"""What `pack bench`, `pack tune` and `pack profile` run: loader sweeps, the tuner, the
per-stage profile, plots; and LoaderMonitor (monitor), which times how long a training
loop waits for data. The CLI imports the rest on demand, the datasets never do; this
file imports nothing, so importing `LoaderMonitor` costs numpy and logging only."""
