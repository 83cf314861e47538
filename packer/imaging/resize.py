"""Fit decoded RGB pixels to an exact size for the npy format, with torch's uint8 resize.

Why torch inside packer (the design's module map keeps packer torch-free): Pillow's
resize is plain C; torch's antialiased bilinear kernel for uint8 channels-last input is
vectorised, so it is faster, and computes the same filter as Pillow's BILINEAR (readers'
tests bound the difference). Resizing is most of the cost of packing npy, so packing npy
is faster with it. torch is imported only by npy conversions (load_torch, up front):
`pack info`, pass-through and re-encoding conversions never load it.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from packer.imaging.pillow import Fit


def fit_pixels(hwc: np.ndarray, size: tuple[int, int], fit: Fit,
               source: tuple[int, int] | None = None) -> bytes:
    """(H, W, 3) uint8 -> raw RGB bytes of exactly `size` (height, width).

    stretch: resize to the size; crop: scale so the image covers the size and cut the
    centre; pad: scale so it fits inside and centre it on black. Like Pillow's
    `fit_image`, except that the crop box is rounded to whole pixels.
    `source` is the (width, height) of the image before a DCT-scaled decode: the
    proportions come from it, so the result does not depend on the decode's rounding.
    """
    out_h, out_w = size
    height, width = hwc.shape[:2]
    source_w, source_h = source or (width, height)
    if fit == "stretch":
        return _resize(hwc, size).tobytes()
    if fit == "crop":
        scale = max(out_w / source_w, out_h / source_h)
        box_w = _centred(width, width * out_w / scale / source_w)
        box_h = _centred(height, height * out_h / scale / source_h)
        left, top = (width - box_w) // 2, (height - box_h) // 2
        return _resize(hwc[top:top + box_h, left:left + box_w], size).tobytes()
    scale = min(out_w / source_w, out_h / source_h)
    new_w = min(out_w, max(1, round(source_w * scale)))
    new_h = min(out_h, max(1, round(source_h * scale)))
    canvas = np.zeros((out_h, out_w, 3), np.uint8)
    top, left = (out_h - new_h) // 2, (out_w - new_w) // 2
    canvas[top:top + new_h, left:left + new_w] = _resize(hwc, (new_h, new_w))
    return canvas.tobytes()


def _centred(side: int, exact: float) -> int:
    """The whole-pixel crop nearest `exact` that lies centred on `side` (the same parity),
    so the crop's centre is the image's, as the fractional box of Pillow's resize is."""
    near = min(side, max(1, round(exact)))
    if (side - near) % 2 == 0:
        return near
    below, above = near - 1, near + 1
    options = [n for n in (below, above) if 1 <= n <= side]
    return min(options, key=lambda n: abs(n - exact)) if options else near


def load_torch() -> None:
    """Import torch now, in the calling (main) thread, before any worker needs it.

    Called when an npy conversion starts: the slow import then happens once, before DST
    is touched, where a Ctrl-C is an ordinary early interrupt, rather than in a worker
    thread that an interrupted run would have to wait for. A Ctrl-C is held back until the
    import ends: raised inside torch's C++ import code (pybind11), a KeyboardInterrupt
    aborts the process (`terminate called after throwing ... error_already_set`, exit -6).
    """
    with _sigint_held():
        import torch  # noqa: F401


@contextmanager
def _sigint_held() -> Iterator[None]:
    """Record a SIGINT instead of acting on it, then deliver it to the handler as it was."""
    held: list[int] = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, _: held.append(signum))
    except ValueError:  # not the main thread: signals go to the main thread anyway
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            signal.raise_signal(signal.SIGINT)


def _resize(hwc: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Antialiased bilinear resize of (H, W, 3) uint8 to `size`, as (H, W, 3).

    The permuted view is channels-last NCHW, which selects torch's fast uint8 kernel; with
    the batch stride spelled out (indexing, not unsqueeze), torch also recognises it as
    channels-last, and the kernel writes channels-last output: (H, W, 3) with no copy.
    """
    import torch
    from torch.nn import functional

    _one_torch_thread_per_worker()
    if hwc.shape[:2] == size:
        return np.ascontiguousarray(hwc)
    batch = torch.from_numpy(hwc)[None].permute(0, 3, 1, 2)
    out = functional.interpolate(batch, size=size, mode="bilinear", antialias=True,
                                 align_corners=False)
    return _interleaved(out[0].numpy())


def _interleaved(chw: np.ndarray) -> np.ndarray:
    """(3, H, W) -> contiguous (H, W, 3): a view when the kernel wrote channels-last,
    else one strided copy per channel (faster than a transposing copy)."""
    hwc = chw.transpose(1, 2, 0)
    if hwc.flags.c_contiguous:
        return hwc
    out = np.empty(hwc.shape, np.uint8)
    for channel in range(3):
        out[:, :, channel] = chw[channel]
    return out


_PREPARED = threading.local()


def _one_torch_thread_per_worker() -> None:
    """In a worker thread, let torch's resize use that thread alone.

    The workers already keep every core busy; torch's own threads on top of them add
    CPU time for no speed. OpenMP keeps the thread count per calling thread, so the main
    thread keeps its own setting.
    """
    if getattr(_PREPARED, "done", False):
        return
    if threading.current_thread() is not threading.main_thread():
        import torch

        torch.set_num_threads(1)
    _PREPARED.done = True
