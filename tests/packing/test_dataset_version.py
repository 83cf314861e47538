"""A dataset's version (packer.dataset.open), the one key of every cache and copy: a
reconversion in place is a new version, an untouched dataset keeps its own."""

from __future__ import annotations

from pathlib import Path

from packer import ConvertOptions, convert
from packer.dataset.open import local_version, url_version_name
from packer.testing import make_sample_folder


def test_a_reconversion_in_place_is_a_new_version(tmp_path: Path) -> None:
    src = make_sample_folder(tmp_path / "src", count=6, classes=2, min_side=8, max_side=10)
    dst = tmp_path / "out.lmdb"
    convert(src, dst, "lmdb", run=ConvertOptions(workers=0))
    before = local_version(dst)
    assert local_version(dst) == before == local_version(dst)
    assert len(before.name()) == 32 and before.name() == local_version(dst).name()
    convert(src, dst, "lmdb", run=ConvertOptions(workers=0, overwrite=True))
    after = local_version(dst)
    assert after != before and after.name() != before.name()


def test_a_url_version_is_its_address_and_index_content() -> None:
    name = url_version_name("s3://bucket/photos.wds/", b'{"format": "wds"}')
    assert name == url_version_name("s3://bucket/photos.wds", b'{"format": "wds"}')
    assert name != url_version_name("s3://bucket/photos.wds", b'{"format": "wds", "x": 1}')
    assert name != url_version_name("s3://bucket/other.wds", b'{"format": "wds"}')
