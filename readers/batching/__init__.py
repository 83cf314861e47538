"""Batches leaving DataLoader workers: `collate`, and the recycled shared memory it sends
them in (`_shm_pool`). Named `batching`, not `collate`: `readers.collate` is the function."""
