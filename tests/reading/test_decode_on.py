"""readers.decode_on: the CPU fallback gives the CPU readers' pixels (size=, augment= with
the same seed and epoch); the device pipeline's geometry, run on the CPU, crops the
same boxes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import simplejpeg
import torch
from torch.utils.data import DataLoader

from readers import (
    CenterCrop,
    PackedDataset,
    PackedIterableDataset,
    RandomResizedCrop,
    RawBatch,
    collate,
    decode_on,
)
from readers.decoding._cuda_decode import decode_cuda
from readers.decoding.gpu_decoders import Decoder
from tests.helpers import pack_wds

BATCH = 6


@pytest.fixture(scope="module")
def wds(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return pack_wds(tmp_path_factory.mktemp("decode_on"), 24, 10, 40, 120)


def _pairs(wds: Path, **options: Any) -> list[tuple[RawBatch, torch.Tensor]]:
    """(raw batch, the CPU readers' images of the same samples), shuffled map-style."""
    raw_ds = PackedDataset(wds, decode="raw")
    cpu_ds = PackedDataset(wds, **options)
    order = torch.randperm(len(raw_ds), generator=torch.Generator().manual_seed(5)).tolist()
    out = []
    for start in range(0, len(order), BATCH):
        picks = order[start:start + BATCH]
        raw, _ = collate(raw_ds.__getitems__(picks))
        out.append((raw, torch.stack([cpu_ds[i][0] for i in picks])))
    return out


def test_cpu_fallback_equals_the_cpu_readers_with_size(wds: Path) -> None:
    for raw, want in _pairs(wds, size=(24, 20)):
        got = decode_on(raw, "cpu", size=(24, 20))
        assert got.shape == (len(raw), 3, 24, 20) and torch.equal(got, want)


@pytest.mark.parametrize("augment", [RandomResizedCrop(24), CenterCrop(20, resize=28),
                                     CenterCrop(32)])
def test_cpu_fallback_equals_the_cpu_readers_with_augment(wds: Path, augment: Any) -> None:
    for epoch in (0, 3):
        cpu = PackedDataset(wds, augment=augment, seed=11)
        cpu.set_epoch(epoch)
        raw_ds = PackedDataset(wds, decode="raw")
        loader = DataLoader(raw_ds, batch_size=BATCH, shuffle=True, collate_fn=collate,
                            generator=torch.Generator().manual_seed(epoch))
        for raw, _ in loader:
            assert raw.indices is not None
            want = torch.stack([cpu[i][0] for i in raw.indices.tolist()])
            got = decode_on(raw, "cpu", augment=augment, seed=11, epoch=epoch)
            assert torch.equal(got, want)


def test_streamed_batches_take_indices_for_random_crops(wds: Path) -> None:
    stream = PackedIterableDataset(wds, decode="raw", shuffle=False)
    raw, _ = next(iter(DataLoader(stream, batch_size=BATCH, collate_fn=collate)))
    assert raw.indices is None
    with pytest.raises(ValueError, match="pass indices="):
        decode_on(raw, "cpu", augment=RandomResizedCrop(16))
    crop = RandomResizedCrop(16)
    cpu = PackedDataset(wds, augment=crop, seed=2)
    got = decode_on(raw, "cpu", augment=crop, seed=2, indices=range(BATCH))
    assert torch.equal(got, torch.stack([cpu[i][0] for i in range(BATCH)]))
    centered = decode_on(raw, "cpu", augment=CenterCrop(16))  # needs no index
    assert centered.shape == (BATCH, 3, 16, 16)


def test_bad_arguments_are_refused(wds: Path) -> None:
    raw, _ = _pairs(wds, size=(8, 8))[0]
    with pytest.raises(ValueError, match="sizes"):
        decode_on(raw, "cpu")  # the stored images differ in size
    with pytest.raises(ValueError, match="augment sets the output size"):
        decode_on(raw, "cpu", size=(8, 8), augment=CenterCrop(8))
    with pytest.raises(TypeError, match="RawBatch"):
        decode_on([b"x"], "cpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="indices for a batch"):
        decode_on(raw, "cpu", augment=RandomResizedCrop(8), indices=[0])


def _full(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor | None]:
    """A stand-in for the GPU decoder: full-size RGB, planar (3, H, W), on `device`."""
    return [torch.from_numpy(simplejpeg.decode_jpeg(bytes(t.numpy()), colorspace="RGB"))
            .permute(2, 0, 1).to(device) for t in data]


_full_decode = Decoder("stand-in", _full)


@pytest.mark.parametrize("options", [{"size": (24, 20)}, {"augment": RandomResizedCrop(24)},
                                     {"augment": CenterCrop(20, resize=28)}])
def test_the_device_pipeline_crops_the_cpu_boxes(wds: Path, options: dict[str, Any]) -> None:
    """Run on the CPU with a full decode: within a few levels of the CPU readers (which
    decode DCT-scaled), where another box would be tens of levels away."""
    augment = options.get("augment")
    for raw, want in _pairs(wds, **options, **({"seed": 4} if augment else {})):
        assert raw.indices is not None
        crops = [(4, 0, i) for i in raw.indices.tolist()] if augment else []
        got = decode_cuda(raw, torch.device("cpu"), options.get("size"), augment, crops,
                          decoder=_full_decode)
        assert got.shape == want.shape and got.dtype == torch.uint8
        diff = np.abs(got.numpy().astype(np.int16) - want.numpy().astype(np.int16))
        assert float(diff.mean()) < 2.0, float(diff.mean())  # another seed: ~36


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without CUDA")
def test_the_gpu_check_says_when_there_is_no_cuda_device(
        capsys: pytest.CaptureFixture[str]) -> None:
    from devtools import gpu_check

    assert gpu_check.main([]) == 2
    assert "no CUDA device" in capsys.readouterr().err
