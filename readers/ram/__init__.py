"""Records held in RAM: whole datasets (`in_memory=True`), one copy per machine on a tmpfs
shared by every worker and rank and removed when its last user ends; and each process's
LRU of recently read chunks.

    copies         the copy a reader opens, and remove_unused for leftovers
    memory_limit   whether a copy fits (free memory, the cgroup limit, the tmpfs)
    _tmpfs         the tmpfs folder: locking, sharing, a watcher that removes it
    chunk_cache    ChunkCache: a per-process LRU of encoded chunks (PackedDataset's
                   max_cache_bytes), for formats not read through a memory map
"""

from readers.ram.copies import remove_unused

__all__ = ["remove_unused"]
