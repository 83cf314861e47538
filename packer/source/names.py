"""Which file names are images: shared by the folder scan and the archive scan, so an
archive is read exactly as the folder it extracts to."""

from __future__ import annotations

IMAGE_EXTENSIONS = frozenset(
    {".jpg", ".jpeg", ".png", ".webp", ".bmp", ".gif", ".tif", ".tiff", ".ppm", ".pgm", ".pbm"}
)


def image_name(name: str) -> bool:
    """A visible name with an image extension (what pathlib calls the suffix)."""
    dot = name.rfind(".")
    return dot > 0 and not name.startswith(".") and name[dot:].lower() in IMAGE_EXTENSIONS
