"""Training side: PyTorch datasets over packed datasets, split exactly once across DDP ranks.

    from readers import PackedDataset, PackedIterableDataset, ChunkSampler, collate

`readers` depends on `packer`, never the reverse.
"""

from readers.batching.collate import collate
from readers.datasets import PackedDataset, PackedIterableDataset, Sample
from readers.resume import loop_state
from readers.sampler import PAD_LABEL, ChunkSampler, PaddedIndex

__all__ = [
    "PAD_LABEL",
    "ChunkSampler",
    "PackedDataset",
    "PackedIterableDataset",
    "PaddedIndex",
    "Sample",
    "collate",
    "loop_state",
]
