"""Reading: the datasets, decode and crops, batches, shared memory, fields, in-memory and
remote reads, mixing, weighting, sharding."""
