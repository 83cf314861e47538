"""WebDataset shards at a URL (S3 here: moto's server on loopback) as SRC: downloaded once
into the shard cache, converted as the same local shards are, and not downloaded again
by `--resume`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import assert_one_line_error, run_pack
from tests.packing.test_wds_source import stored_by_key, write_shards
from tests.s3_server import BUCKET


@pytest.fixture
def shard_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setenv("PACKER_SHARD_CACHE", str(cache))
    return cache


def upload(folder: Path, prefix: str) -> str:
    import s3fs

    fs = s3fs.S3FileSystem()
    for shard in sorted(folder.iterdir()):
        fs.put_file(str(shard), f"{BUCKET}/{prefix}/{shard.name}")
    fs.invalidate_cache()
    return f"s3://{BUCKET}/{prefix}"


@pytest.mark.parametrize("spelling", ["braces", "folder"])
def test_shards_at_a_url_convert_like_local_shards(endpoint: str, tmp_path: Path,
                                                   shard_cache: Path, spelling: str) -> None:
    write_shards(tmp_path / "shards")
    url = upload(tmp_path / "shards", f"wds-{spelling}")
    src = f"{url}/train-{{000000..000001}}.tar" if spelling == "braces" else f"{url}/"
    result = run_pack("convert", src, tmp_path / "remote", "--to", "lmdb",
                      "--storage-option", f"endpoint_url={endpoint}")
    assert result.exit_code == 0, result.output
    assert run_pack("convert", tmp_path / "shards", tmp_path / "local", "--to",
                    "lmdb").exit_code == 0
    assert stored_by_key(tmp_path / "remote") == stored_by_key(tmp_path / "local")
    cached = sorted(shard_cache.rglob("*.tar"))
    assert [path.name for path in cached] == ["train-000000.tar", "train-000001.tar"]
    stamps = [path.stat().st_mtime_ns for path in cached]
    again = run_pack("convert", src, tmp_path / "remote", "--to", "lmdb", "--resume",
                     "--storage-option", f"endpoint_url={endpoint}")
    assert again.exit_code == 0 and "nothing to resume" in again.output
    assert [path.stat().st_mtime_ns for path in cached] == stamps  # not downloaded again


def test_a_missing_remote_shard_is_one_line(endpoint: str, tmp_path: Path,
                                            shard_cache: Path) -> None:
    write_shards(tmp_path / "shards")
    url = upload(tmp_path / "shards", "wds-missing")
    result = run_pack("convert", f"{url}/train-{{000000..000002}}.tar", tmp_path / "out",
                      "--to", "wds", "--storage-option", f"endpoint_url={endpoint}")
    assert_one_line_error(result, 1, "train-000002.tar")
    assert not (tmp_path / "out").exists()
