"""Bytes on disks: atomic writes, file hashing, shard files written and hashed at once."""
