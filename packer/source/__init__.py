"""What a conversion reads: an image folder, a CSV/JSONL manifest or a packed dataset,
scanned into compact item storage."""
