"""Batches leaving DataLoader workers as a few buffers: `collate`, the raw batch
(`RawBatch`: stored bytes + offsets in one buffer), columns of text as one
buffer (`_columns`), and the recycled shared memory they travel in (`_shm_pool`,
`_pooled`). Named `batching`, not `collate`: `readers.collate` is the function."""
