"""One JPEG fast path (packer.imaging.jpeg) for pack time and train time: both sides take
it for the same files, and what they decode is what Pillow, the judge, decodes.

Before, readers had a walker of their own that ignored an XMP orientation, which Pillow
(and so the pack side) applies: such a photo came out of a dataset unrotated.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from packer.imaging.jpeg import fast_size, load_rgb_fast
from packer.imaging.jpeg_frame import UNKNOWN, exif_orientation
from packer.imaging.pillow import load_rgb
from packer.testing import synthetic_image
from readers.decoding.decode import decode
from tests.helpers import jpeg_bytes

XMP = ('<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/'
       '02/22-rdf-syntax-ns#"><rdf:Description xmlns:tiff="http://ns.adobe.com/tiff/1.0/" '
       'tiff:Orientation="{}"/></rdf:RDF></x:xmpmeta>')


def exif(orientation: int | None) -> bytes:
    tags = Image.Exif()
    tags[0x010F] = "camera"
    if orientation is not None:
        tags[0x0112] = orientation
    return tags.tobytes()


def cases() -> dict[str, tuple[bytes, bool]]:
    """name: (JPEG bytes, whether the fast path may decode it)."""
    image = synthetic_image(np.random.default_rng(3), 120, 80)
    xmp6, xmp1 = XMP.format(6).encode(), XMP.format(1).encode()
    return {
        "plain": (jpeg_bytes(image), True),
        "exif upright": (jpeg_bytes(image, exif=exif(1)), True),
        "exif rotated": (jpeg_bytes(image, exif=exif(6)), False),
        "exif without the tag": (jpeg_bytes(image, exif=exif(None)), True),
        "xmp upright": (jpeg_bytes(image, xmp=xmp1), True),
        "xmp rotated": (jpeg_bytes(image, xmp=xmp6), False),
        "xmp rotated, exif without the tag": (jpeg_bytes(image, exif=exif(None), xmp=xmp6),
                                              False),
        "exif upright wins over xmp": (jpeg_bytes(image, exif=exif(1), xmp=xmp6), True),
        "gray": (jpeg_bytes(image.convert("L")), True),
        "progressive": (jpeg_bytes(image, progressive=True), True),
        "cmyk": (jpeg_bytes(image.convert("CMYK")), False),
        "rgb colour space": (jpeg_bytes(image, keep_rgb=True), False),
    }


@pytest.mark.parametrize("name", list(cases()))
def test_pack_and_read_take_the_fast_path_for_the_same_files(name: str) -> None:
    data, fast = cases()[name]
    assert (fast_size(data) is not None) == fast
    assert (load_rgb_fast(data, (32, 32), "crop") is not None) == fast


@pytest.mark.parametrize("name", list(cases()))
def test_read_side_decodes_exactly_what_pillow_decodes(name: str) -> None:
    """At the stored size both paths are one full libjpeg decode: bit-identical, rotation
    included."""
    data, _ = cases()[name]
    expected = np.asarray(load_rgb(data))
    out = decode(data)
    assert isinstance(out, torch.Tensor)
    assert np.array_equal(out.permute(1, 2, 0).numpy(), expected)


def test_the_walker_asks_pillow_only_where_it_cannot_tell() -> None:
    found = {name: exif_orientation(data) for name, (data, _) in cases().items()}
    assert found["exif rotated"] == 6 and found["exif upright wins over xmp"] == 1
    assert found["plain"] == found["exif without the tag"] == 1
    assert found["xmp rotated"] == found["xmp upright"] == UNKNOWN
