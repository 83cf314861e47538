"""The on-disk contract: what a packed dataset is (its records, index.json, the per-sample
table and the checks that refuse a damaged one), whatever the format."""
