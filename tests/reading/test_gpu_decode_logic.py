"""The CUDA decode path's logic, run on the CPU with stand-in decoders: the decoder probe
and fall-through, the per-image retry of a batch a decoder fails, the CPU path for an
image it refuses, the pre-shrink before a large downscale, offsets read once, and the
geometry of a whole batch in a fixed number of matrix products."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from readers import CenterCrop, RandomResizedCrop, RawBatch, decode_on
from readers.decoding import gpu_decoders
from readers.decoding._cuda_decode import decode_cuda, geometry
from readers.decoding.batch_resize import Geometry, apply, box_axis, weights, whole_axis
from readers.decoding.decode import dct_factor
from readers.decoding.gpu_decoders import Choice, Decoder, choose, decode_each

CPU = torch.device("cpu")


def _full(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor | None]:
    return [torch.from_numpy(simplejpeg.decode_jpeg(bytes(t.numpy()), colorspace="RGB"))
            .permute(2, 0, 1).to(device) for t in data]


def _progressive(data: torch.Tensor) -> bool:
    return b"\xff\xc2" in bytes(data.numpy())


class Refusing:
    """A stand-in that fails a whole batch holding a progressive JPEG (torchvision's way)
    or leaves it out as None (nvImageCodec's), as nvJPEG's hardware decoder refuses them."""

    def __init__(self, raise_for_batch: bool) -> None:
        self.raise_for_batch = raise_for_batch
        self.calls: list[int] = []

    def __call__(self, data: list[torch.Tensor], device: torch.device
                 ) -> list[torch.Tensor | None]:
        self.calls.append(len(data))
        refused = [_progressive(t) for t in data]
        if self.raise_for_batch and any(refused):
            raise RuntimeError("nvjpegDecodeBatched failed: NVJPEG_STATUS_JPEG_NOT_SUPPORTED")
        return [None if no else image for no, image in zip(refused, _full(data, device),
                                                             strict=True)]


def _photo(height: int, width: int, seed: int) -> np.ndarray:
    """Smooth colour gradients with texture: a stand-in for a photograph's statistics."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width] / max(height, width)
    base = np.stack([np.sin(6 * x + seed), np.cos(5 * y), np.sin(4 * (x + y))], -1)
    noise = rng.normal(0, 0.08, (height // 8 + 1, width // 8 + 1, 3)).repeat(8, 0).repeat(8, 1)
    return ((base + noise[:height, :width] + 1.2) * 100).clip(0, 255).astype(np.uint8)


def _jpeg(pixels: np.ndarray, progressive: bool = False) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=88, progressive=progressive)
    return out.getvalue()


@pytest.fixture(scope="module")
def mixed_batch() -> RawBatch:
    """Eight JPEGs of several sizes, two of them progressive, and one PNG."""
    samples = [_jpeg(_photo(120 + 17 * k, 160 - 9 * k, k), progressive=k in (2, 5))
               for k in range(8)]
    png = io.BytesIO()
    Image.fromarray(_photo(90, 70, 9)).save(png, "PNG")
    return RawBatch.of([*samples, png.getvalue()], indices=list(range(9)))


def _candidate(name: str, decode: gpu_decoders.Decode) -> tuple[str, object]:
    return name, lambda device: Decoder(name, decode)


def _missing(device: torch.device) -> Decoder:
    raise ImportError("No module named 'torchcodec'")


def _broken(device: torch.device) -> Decoder:
    raise RuntimeError("libnvjpeg.so.13: cannot open shared object file")


def _wrong_shape(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor | None]:
    return [image.permute(1, 2, 0) if image is not None else None  # interleaved, not planar
            for image in _full(data, device)]


def test_the_first_decoder_that_passes_the_probe_is_chosen_and_each_other_says_why() -> None:
    choice = choose(CPU, [("torchcodec", _missing), ("nvImageCodec", _broken),  # type: ignore[list-item]
                          _candidate("old", _wrong_shape), _candidate("good", _full),
                          _candidate("later", _full)])
    assert choice.decoder is not None and choice.decoder.name == "good"
    reasons = dict(choice.tried)
    assert list(reasons) == ["torchcodec", "nvImageCodec", "old", "good"]
    assert reasons["torchcodec"].startswith("not installed")
    assert "does not start" in reasons["nvImageCodec"] and "libnvjpeg" in reasons["nvImageCodec"]
    assert "shape (16, 24, 3)" in reasons["old"]
    assert reasons["good"].startswith("chosen")


def test_a_decoder_whose_pixels_are_off_fails_the_probe() -> None:
    def dark(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor | None]:
        return [image // 2 if image is not None else None for image in _full(data, device)]

    choice = choose(CPU, [_candidate("dark", dark)])  # type: ignore[list-item]
    assert choice.decoder is None and "levels from libjpeg-turbo" in choice.describe()


def test_without_a_working_decoder_the_error_lists_what_was_tried(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_decoders, "CANDIDATES", (("torchcodec", _missing),
                                                     ("nvImageCodec", _broken)))
    gpu_decoders._default_choice.cache_clear()
    try:
        with pytest.raises(ImportError, match=r"torchcodec: not installed.*nvImageCodec: "
                                              r"does not start.*pip install"):
            gpu_decoders.require(torch.device("cpu"))
    finally:
        gpu_decoders._default_choice.cache_clear()


@pytest.mark.parametrize("raise_for_batch", [True, False])
def test_a_refused_jpeg_is_retried_alone_and_decoded_on_the_cpu(
        mixed_batch: RawBatch, raise_for_batch: bool) -> None:
    refusing = Refusing(raise_for_batch)
    augment = RandomResizedCrop(48)
    crops = [(3, 1, i) for i in range(len(mixed_batch))]
    got = decode_cuda(mixed_batch, CPU, None, augment, crops, Decoder("refusing", refusing))
    want = decode_on(mixed_batch, "cpu", augment=augment, seed=3, epoch=1)
    assert got.shape == want.shape == (9, 3, 48, 48)
    for b in (2, 5, 8):  # refused (progressive) and the PNG: the CPU path's own pixels
        assert torch.equal(got[b], want[b])
    diff = (got.int() - want.int()).abs().float().mean(dim=(1, 2, 3))
    assert float(diff.max()) < 1.0, diff
    # one batched call of the 8 JPEGs; where it raised, one call per image after it
    assert refusing.calls == ([8] + [1] * 8 if raise_for_batch else [8])


def test_decode_each_keeps_none_only_where_an_image_fails() -> None:
    data, _ = gpu_decoders.probe_jpeg()
    good = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    bad = torch.frombuffer(bytearray(_jpeg(_photo(40, 40, 1), progressive=True)),
                           dtype=torch.uint8)
    out = decode_each(Decoder("refusing", Refusing(True)), [good, bad, good], CPU)
    assert [image is None for image in out] == [False, True, False]
    assert decode_each(Decoder("refusing", Refusing(True)), [], CPU) == []


def test_a_large_downscale_pre_shrinks_as_the_cpu_path_scales() -> None:
    """A 12-megapixel photo to 32 x 32: the weights average 8 x 8 blocks first (the CPU
    path's 1/8 DCT scale), and the result agrees with the CPU path."""
    pixels = _photo(3024, 4032, 7)
    batch = RawBatch.of([_jpeg(pixels)], indices=[0])
    augment = RandomResizedCrop(32, scale=(0.9, 1.0))
    plan = geometry((3024, 4032), None, augment, (5, 0, 0))
    box = augment.params(5, 0, 0, (3024, 4032))
    assert plan.rows.factor == plan.cols.factor == dct_factor((box.height, box.width), (32, 32))
    assert plan.rows.factor == 8
    got = decode_cuda(batch, CPU, None, augment, [(5, 0, 0)], Decoder("full", _full))
    want = decode_on(batch, "cpu", augment=augment, seed=5)
    assert float((got.int() - want.int()).abs().float().mean()) < 1.0


def test_offsets_are_read_once_per_batch(mixed_batch: RawBatch,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    reads = []
    offsets = RawBatch.offsets.fget  # type: ignore[attr-defined]

    def counted(batch: RawBatch) -> torch.Tensor:
        reads.append(1)
        return offsets(batch)

    jpegs = RawBatch.of([bytes(mixed_batch.memory(b)) for b in (0, 1, 3, 4)], [0, 1, 3, 4])
    monkeypatch.setattr(RawBatch, "offsets", property(counted))
    decode_cuda(jpegs, CPU, (32, 32), None, [], Decoder("full", _full))
    assert len(reads) == 1


def test_a_batch_takes_two_matrix_products_not_a_loop_of_resizes(
        mixed_batch: RawBatch) -> None:
    jpegs = RawBatch.of([bytes(mixed_batch.memory(b)) for b in range(8)], list(range(8)))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        decode_cuda(jpegs, CPU, None, RandomResizedCrop(40), [(0, 0, i) for i in range(8)],
                    Decoder("full", _full))
    names = [event.name for event in prof.events()]
    assert names.count("aten::bmm") == 2
    assert "aten::upsample_bilinear2d" not in " ".join(names)
    assert "aten::_upsample_bilinear2d_aa" not in " ".join(names)


def _reference(image: torch.Tensor, top: int, left: int, height: int, width: int,
               out: tuple[int, int]) -> torch.Tensor:
    """Pillow's antialiased bilinear resize of the crop (torch's kernel, which the CPU
    path uses where it applies, returns edge pixels for sides of one pixel)."""
    crop = image[:, top:top + height, left:left + width].permute(1, 2, 0).numpy()
    resized = Image.fromarray(np.ascontiguousarray(crop)).resize(
        (out[1], out[0]), Image.Resampling.BILINEAR)
    return torch.from_numpy(np.array(resized)).permute(2, 0, 1)


@settings(max_examples=40, derandomize=True)
@given(st.data())
def test_batched_weights_match_torch_antialiased_resize(data: st.DataObject) -> None:
    """Crop boxes of whole pixels, down- and upscaled, flipped or not: Pillow's
    antialiased bilinear resize up to a level of rounding."""
    count = data.draw(st.integers(1, 4))
    out = (data.draw(st.integers(1, 40)), data.draw(st.integers(1, 40)))
    images, plans, want = [], [], []
    for k in range(count):
        h, w = data.draw(st.integers(1, 90)), data.draw(st.integers(1, 90))
        top, left = data.draw(st.integers(0, h - 1)), data.draw(st.integers(0, w - 1))
        bh, bw = data.draw(st.integers(1, h - top)), data.draw(st.integers(1, w - left))
        flipped = data.draw(st.booleans())
        image = torch.from_numpy(np.random.default_rng(k).integers(0, 256, (3, h, w),
                                                                    dtype=np.uint8))
        images.append(image)
        plans.append(Geometry(box_axis(h, top, bh, 1, out[0]), box_axis(w, left, bw, 1, out[1]),
                              flipped))
        resized = _reference(image, top, left, bh, bw, out)
        want.append(resized.flip(-1) if flipped else resized)
    got = torch.empty((count, 3, *out), dtype=torch.uint8)
    apply(images, plans, out, got)
    assert int((got.int() - torch.stack(want).int()).abs().max()) <= 1


@settings(max_examples=40, derandomize=True)
@given(length=st.integers(1, 3000), out=st.integers(1, 300), factor=st.sampled_from([1, 2, 4, 8]),
       start=st.floats(0, 0.9), share=st.floats(0.05, 1.0))
def test_each_output_pixel_takes_weights_summing_to_one_inside_its_region(
        length: int, out: int, factor: int, start: float, share: float) -> None:
    box_start = float(int(start * length)) if factor == 1 else start * length
    box_length = max(1.0, min(length - box_start, share * length))
    axis = box_axis(length, box_start, box_length, factor, out)
    assert 0 <= axis.start < axis.stop <= length and axis.start % factor == 0
    matrix = weights([axis, whole_axis(length, out + 3, 1)], out, length, CPU)
    sums = matrix.sum(-1)
    assert torch.allclose(sums, torch.ones_like(sums), atol=1e-4)
    assert float(matrix[0, :, axis.length:].abs().sum()) == 0.0  # nothing past the region


def test_center_crop_resizes_the_whole_image_then_cuts_as_torchvision() -> None:
    pixels = _photo(150, 200, 3)
    batch = RawBatch.of([_jpeg(pixels)])
    augment = CenterCrop(64, resize=80)
    plan = geometry((150, 200), None, augment, (0, 0, 0))
    assert plan.rows.target == 80 and plan.rows.offset == 8 and plan.cols.offset > 0
    got = decode_cuda(batch, CPU, None, augment, [(0, 0, 0)], Decoder("full", _full))
    want = decode_on(batch, "cpu", augment=augment)
    assert float((got.int() - want.int()).abs().float().mean()) < 0.5


def test_choice_describes_every_candidate() -> None:
    choice = Choice(None, (("a", "not installed (x)"), ("b", "fails the probe decode: y")))
    assert choice.describe() == "a: not installed (x); b: fails the probe decode: y"


def test_a_cuda_path_needs_no_decoder_for_a_batch_without_jpegs(tmp_path: Path) -> None:
    png = io.BytesIO()
    Image.fromarray(_photo(30, 40, 2)).save(png, "PNG")
    batch = RawBatch.of([png.getvalue()] * 2)
    got = decode_cuda(batch, CPU, (16, 16), None, [], None)  # never asks for a decoder
    assert torch.equal(got, decode_on(batch, "cpu", size=(16, 16)))
