"""Datasets held in RAM (`in_memory=True`): one copy per machine on a tmpfs, shared by
every worker and rank, removed when its last user ends.

    copies         the copy a reader opens, and remove_unused for leftovers
    memory_limit   whether a copy fits (free memory, the cgroup limit, the tmpfs)
    _tmpfs         the tmpfs folder: locking, sharing, a watcher that removes it
"""

from readers.ram.copies import remove_unused

__all__ = ["remove_unused"]
