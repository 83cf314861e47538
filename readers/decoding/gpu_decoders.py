"""The GPU JPEG decoders `readers.decode_on` can use, each proven by a probe before it is chosen.

In order of preference: torchcodec (`torchcodec.decoders.decode_jpeg`, the successor of
torchvision's image decoders), nvImageCodec (`nvidia.nvimgcodec`, set up to upsample
chroma as libjpeg-turbo does and to decode on the GPU only), torchvision
(`torchvision.io.decode_jpeg`). A library that imports is not yet a decoder that works:
an old release without list input, a build without nvJPEG, or a wheel for another CUDA
all import and then fail. So each candidate decodes a tiny JPEG pair on the device and
must give the right shape, device and pixels; the first that does is chosen, and
`choose(device).tried` says why each one before it was not.

Every call runs on a side stream that the caller's stream then waits for, and each output
tensor is recorded on the caller's stream: a decoder that writes on a stream of its own
can then never be handed memory that kernels queued on the caller's stream still read.
A batch the decoder fails is retried image by image, and an image it refuses comes back
as None (the caller decodes it on the CPU).
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache

import numpy as np
import simplejpeg
import torch
from torch.utils.dlpack import from_dlpack

Decode = Callable[[list[torch.Tensor], torch.device], list["torch.Tensor | None"]]
PROBE_TOLERANCE = 4.0  # mean |probe - libjpeg-turbo| in levels a working decoder stays within


@dataclass(frozen=True)
class Decoder:
    """name, and decode: encoded uint8 CPU tensors -> (3, H, W) uint8 on the device, or None
    for an image it refuses; it may raise for the whole batch."""

    name: str
    decode: Decode = field(repr=False)


@dataclass(frozen=True)
class Choice:
    """The decoder chosen for a device (None: none works) and, per candidate, why or why not."""

    decoder: Decoder | None
    tried: tuple[tuple[str, str], ...]

    def describe(self) -> str:
        return "; ".join(f"{name}: {why}" for name, why in self.tried)


def concrete(device: torch.device) -> torch.device:
    """`device` with its index: tensors on "cuda" report "cuda:N", which != "cuda"."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def choose(device: torch.device,
           candidates: Sequence[tuple[str, Callable[[torch.device], Decoder]]] | None = None
           ) -> Choice:
    """The first candidate that starts and passes the probe on `device` (cached per device
    for the default candidates)."""
    device = concrete(device)
    if candidates is None:
        return _default_choice(device)
    tried: list[tuple[str, str]] = []
    for name, make in candidates:
        try:
            decoder = make(device)
        except ImportError as exc:
            tried.append((name, f"not installed ({exc})"))
            continue
        except Exception as exc:  # a broken install: a wrong CUDA, a missing library
            tried.append((name, f"does not start: {type(exc).__name__}: {exc}"))
            continue
        failure = probe(decoder, device)
        if failure is None:
            tried.append((name, "chosen: decodes the probe JPEGs on the device"))
            return Choice(decoder, tuple(tried))
        tried.append((name, failure))
    return Choice(None, tuple(tried))


@cache
def _default_choice(device: torch.device) -> Choice:
    return choose(device, CANDIDATES)


def require(device: torch.device) -> Decoder:
    """The chosen decoder for `device`, or an ImportError that says what was tried and
    what to install."""
    choice = choose(device)
    if choice.decoder is None:
        raise ImportError(f"readers.decode_on found no JPEG decoder that works on {device} "
                          f"({choice.describe()}); install one: {install_hint()}")
    return choice.decoder


def install_hint() -> str:
    cuda = (torch.version.cuda or "12").split(".")[0]
    return (f"pip install torchcodec (its Linux wheels decode JPEG with nvJPEG), or "
            f"pip install 'nvidia-nvimgcodec-cu{cuda}[nvjpeg]'")


def probe_jpeg() -> tuple[bytes, np.ndarray]:
    """A 16 x 24 colour JPEG (4:2:0) and libjpeg-turbo's pixels of it."""
    y, x = np.mgrid[0:16, 0:24]
    pixels = np.stack([x * 10, y * 15, (x + y) * 6], axis=-1).astype(np.uint8)
    data = simplejpeg.encode_jpeg(pixels, quality=90, colorsubsampling="420")
    return data, simplejpeg.decode_jpeg(data, colorspace="RGB")


def probe(decoder: Decoder, device: torch.device) -> str | None:
    """None if the decoder decodes a two-image probe batch right on `device`, else why not."""
    data, want = probe_jpeg()
    tensor = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    try:
        images = run(decoder, [tensor, tensor.clone()], device)
    except Exception as exc:
        return f"fails the probe decode: {type(exc).__name__}: {exc}"
    expected = torch.from_numpy(want).permute(2, 0, 1)
    for image in images:
        if image is None or image.dtype != torch.uint8 or image.device != device:
            return f"probe decode gave {_describe(image)}, not uint8 on {device}"
        if tuple(image.shape) != tuple(expected.shape):
            return f"probe decode gave shape {tuple(image.shape)}, not {tuple(expected.shape)}"
        diff = (image.cpu().int() - expected.int()).abs().float().mean().item()
        if diff > PROBE_TOLERANCE:
            return f"probe pixels {diff:.1f} levels from libjpeg-turbo's on average"
    return None


def _describe(image: torch.Tensor | None) -> str:
    return "nothing" if image is None else f"{image.dtype} on {image.device}"


def run(decoder: Decoder, data: list[torch.Tensor],
        device: torch.device) -> list[torch.Tensor | None]:
    """decoder.decode on a side stream the caller's stream waits for (see the module doc)."""
    if device.type != "cuda":
        return decoder.decode(data, device)
    current = torch.cuda.current_stream(device)
    side = _side_stream(device)
    with torch.cuda.stream(side):
        images = decoder.decode(data, device)
    current.wait_stream(side)
    for image in images:
        if image is not None and image.device == device:
            image.record_stream(current)
    return images


@cache
def _side_stream(device: torch.device) -> torch.cuda.Stream:
    return torch.cuda.Stream(device)  # type: ignore[no-untyped-call]


def decode_each(decoder: Decoder, data: list[torch.Tensor],
                device: torch.device) -> list[torch.Tensor | None]:
    """One batched call; where it fails, one call per image. None where an image fails."""
    if not data:
        return []
    try:
        images = run(decoder, data, device)
        if len(images) == len(data):
            return images
    except Exception:  # one image nvJPEG refuses fails torchvision's whole batch
        pass
    return [_decode_one(decoder, one, device) for one in data]


def _decode_one(decoder: Decoder, data: torch.Tensor,
                device: torch.device) -> torch.Tensor | None:
    try:
        images = run(decoder, [data], device)
    except Exception:
        return None
    return images[0] if len(images) == 1 else None


def _torchcodec(device: torch.device) -> Decoder:
    decode_jpeg = importlib.import_module("torchcodec.decoders").decode_jpeg

    def decode(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor | None]:
        return list(decode_jpeg(data, mode="RGB", device=device))

    return Decoder("torchcodec", decode)


def _nvimgcodec(device: torch.device) -> Decoder:
    nv = importlib.import_module("nvidia.nvimgcodec")
    index = device.index if device.index is not None else torch.cuda.current_device()
    backends = [nv.Backend(kind) for kind in (nv.HW_GPU_ONLY, nv.GPU_ONLY, nv.HYBRID_CPU_GPU)]
    decoder = nv.Decoder(device_id=index, backends=backends, options=":fancy_upsampling=1")
    params = nv.DecodeParams(apply_exif_orientation=False, color_spec=nv.SRGB,
                             sample_format=nv.P_RGB)

    def decode(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor | None]:
        streams = [nv.CodeStream(tensor.numpy()) for tensor in data]
        stream = torch.cuda.current_stream(device).cuda_stream
        images = decoder.decode(streams, params=params, cuda_stream=stream)
        return [None if image is None or image.buffer_kind != nv.STRIDED_DEVICE
                else _planar(from_dlpack(image)).clone() for image in images]

    return Decoder("nvImageCodec", decode)


def _planar(image: torch.Tensor) -> torch.Tensor:
    """(3, H, W) from nvImageCodec's planar output (or interleaved, where a release gives it)."""
    if image.dim() == 3 and image.shape[0] != 3 and image.shape[-1] == 3:
        return image.permute(2, 0, 1)
    return image


def _torchvision(device: torch.device) -> Decoder:
    io = importlib.import_module("torchvision.io")

    def decode(data: list[torch.Tensor], device: torch.device) -> list[torch.Tensor | None]:
        with warnings.catch_warnings():  # 0.29 deprecates its decoders for torchcodec's
            warnings.simplefilter("ignore", (DeprecationWarning, UserWarning))
            out = io.decode_jpeg(data, mode=io.ImageReadMode.RGB, device=device)
        return list(out) if isinstance(out, list) else [out]

    return Decoder("torchvision", decode)


CANDIDATES: tuple[tuple[str, Callable[[torch.device], Decoder]], ...] = (
    ("torchcodec", _torchcodec), ("nvImageCodec", _nvimgcodec), ("torchvision", _torchvision))
