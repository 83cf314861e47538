"""Training side: PyTorch datasets over packed datasets, split exactly once across DDP ranks.

    from readers import PackedDataset, PackedIterableDataset, ChunkSampler, collate
    from readers import RawBatch, decode_on   # decode="raw" batches as one buffer; GPU decode
    from readers import RandomResizedCrop, CenterCrop   # train-time crops, fused into decode
    from readers import Mix   # several packed datasets as one, in chosen proportions
    from readers import LoaderMonitor   # times how long a training loop waits for data
    from readers import PartitionOptions, RemoteOptions   # sharding and URL-cache settings
    from readers import OnError   # on_error=: raise (default) or skip a damaged sample
    from readers import loop_state, skip_first_batches   # resume mid-epoch, nothing read twice

`readers` depends on `packer`, never the reverse. Its errors are packer's classes
(`from packer.errors import DecodeError`).
"""

from readers.augment import CenterCrop, RandomResizedCrop
from readers.batching.collate import collate
from readers.batching.raw_batch import RawBatch
from readers.datasets import PackedDataset, PackedIterableDataset
from readers.decoding.device_decode import decode_on
from readers.diagnostics.monitor import LoaderMonitor  # numpy and logging only: adds nothing heavy
from readers.mix import Mix
from readers.options import OnError, PartitionOptions, RemoteOptions
from readers.passes.loop import loop_state
from readers.passes.skip import skip_first_batches
from readers.sampling.sampler import ChunkSampler

__all__ = [
    "CenterCrop",
    "ChunkSampler",
    "LoaderMonitor",
    "Mix",
    "OnError",
    "PackedDataset",
    "PackedIterableDataset",
    "PartitionOptions",
    "RandomResizedCrop",
    "RawBatch",
    "RemoteOptions",
    "collate",
    "decode_on",
    "loop_state",
    "skip_first_batches",
]
