"""What a conversion reads: an image folder, a CSV/JSONL manifest, an archive, Parquet
files with image bytes or a packed dataset, scanned into compact item storage."""
