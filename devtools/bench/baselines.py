"""What scripts/bench_read.py compares our readers with: the pipelines people write.

    PilFolderDataset    ImageFolder + Resize + PILToTensor, i.e. torchvision's
                        default pipeline, written without torchvision
    stock_webdataset    webdataset.WebDataset(urls).decode("pil") + the same resize
    stock_webdataset_raw  the same without the decode: stored bytes + label
    NaiveMemmapDataset  np.load(mmap_mode="r"), torch.from_numpy(images[i]) per item
    memcpy_rate         one thread copying the npy array in batches: the ceiling
    one_thread_rate     a decode function alone, in this process, torch on one thread

Each mirrors its usual form on purpose, slow parts included; that is the point.
"""

from __future__ import annotations

import io
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset, IterableDataset

from packer.source.scan import scan

Size = tuple[int, int]


def pil_resize_to_tensor(image: Image.Image, size: Size) -> torch.Tensor:
    """Resize((H, W)) + PILToTensor as torchvision does them: CHW view of HWC pixels."""
    resized = image.resize((size[1], size[0]), Image.Resampling.BILINEAR)
    return torch.as_tensor(np.array(resized, copy=True)).permute(2, 0, 1)


def pil_bytes_to_tensor(data: bytes, size: Size) -> torch.Tensor:
    """The ImageFolder pipeline on bytes already in memory."""
    image = Image.open(io.BytesIO(data)).convert("RGB")
    return pil_resize_to_tensor(image, size)


class PilFolderDataset(Dataset[tuple[torch.Tensor, int]]):
    """torchvision.datasets.ImageFolder's loader: open, convert("RGB"), resize, to tensor."""

    def __init__(self, root: Path, size: Size) -> None:
        items = scan(root).items
        self.paths = [item.path for item in items]
        self.labels = np.array([item.label for item in items], dtype=np.int64)
        self.size = size

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        with open(self.paths[i], "rb") as handle:
            image = Image.open(handle).convert("RGB")
        return pil_resize_to_tensor(image, self.size), int(self.labels[i])


class _ResizeToTensor:
    """A picklable map for the webdataset pipeline."""

    def __init__(self, size: Size) -> None:
        self.size = size

    def __call__(self, sample: tuple[Image.Image, bytes | int]) -> tuple[torch.Tensor, int]:
        image, label = sample
        return pil_resize_to_tensor(image, self.size), int(label)


def stock_webdataset(urls: Sequence[Path], size: Size) -> IterableDataset[Any]:
    """The README pipeline; its default split gives each DataLoader worker whole shards."""
    import webdataset as wds

    names = [str(url) for url in urls]
    dataset: IterableDataset[Any] = (
        wds.WebDataset(names, shardshuffle=False)
        .decode("pil")
        .to_tuple("jpg;jpeg;png;webp", "cls")
        .map(_ResizeToTensor(size))
    )
    return dataset


def _label_of(sample: tuple[bytes, bytes]) -> tuple[bytes, int]:
    data, label = sample
    return data, int(label)


def stock_webdataset_raw(urls: Sequence[Path]) -> IterableDataset[Any]:
    """The same pipeline without the decode: each sample's stored bytes and its label."""
    import webdataset as wds

    dataset: IterableDataset[Any] = (
        wds.WebDataset([str(url) for url in urls], shardshuffle=False)
        .to_tuple("jpg;jpeg;png;webp", "cls")
        .map(_label_of)
    )
    return dataset


class NaiveMemmapDataset(Dataset[tuple[torch.Tensor, int]]):
    """The obvious npy reader: one memmap, a tensor view per item, default collate."""

    def __init__(self, images: Path, labels: Path) -> None:
        self.path = images
        self.labels = np.load(labels)
        self.images: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        if self.images is None:
            self.images = np.load(self.path, mmap_mode="r")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # read-only memmap view
            return torch.from_numpy(self.images[i]), int(self.labels[i])


def memcpy_rate(images: Path, batch_size: int, epochs: int) -> tuple[float, float]:
    """Images per (wall, CPU) second of one thread copying the npy array, batch by batch.

    Source: the page-cache-warm memmap; destination: one reused batch buffer. The
    first pass maps the pages and is not timed, like a loader's worker start-up.
    """
    array = np.load(images, mmap_mode="r")
    out = np.empty((batch_size, *array.shape[1:]), dtype=array.dtype)

    def one_pass() -> None:
        for start in range(0, len(array), batch_size):
            chunk = array[start : start + batch_size]
            np.copyto(out[: len(chunk)], chunk)

    one_pass()
    begin, cpu_begin = time.perf_counter(), time.process_time()
    for _ in range(epochs):
        one_pass()
    count = epochs * len(array)
    return count / (time.perf_counter() - begin), count / (time.process_time() - cpu_begin)


def one_thread_rate(samples: Sequence[bytes], convert: Callable[[bytes], object]
                    ) -> tuple[float, float]:
    """Images per (wall, CPU) second of `convert`, as one DataLoader worker runs it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # what DataLoader workers use; restored below
    try:
        convert(samples[0])
        begin, cpu_begin = time.perf_counter(), time.process_time()
        for data in samples:
            convert(data)
        wall, cpu = time.perf_counter() - begin, time.process_time() - cpu_begin
    finally:
        torch.set_num_threads(threads)
    return len(samples) / wall, len(samples) / cpu
