"""The CLI: convert, info, verify, the parsers, and the loader commands (bench, tune,
profile, monitor)."""
