"""A real S3 API for the remote tests: moto's server on loopback (never a real AWS
endpoint), a bucket, and the dataset every read test starts from. Its fixtures are
registered by conftest.py; moto and s3fs come with the dev extra."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from packer import ConvertOptions, convert
from packer.conversion.upload import Uploader, convert_remote
from packer.formats.base import ShardOptions

BUCKET = "packer-test"
SHARD_SAMPLES = 5
RUN = ConvertOptions(workers=0, shards=ShardOptions(max_samples=SHARD_SAMPLES))


@pytest.fixture(scope="session")
def endpoint() -> Iterator[str]:
    """moto's S3 server on loopback, a bucket, and AWS_* variables pointing at it."""
    moto_server = pytest.importorskip("moto.server")
    s3fs = pytest.importorskip("s3fs")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    with pytest.MonkeyPatch.context() as patch:
        for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"):
            patch.delenv(name, raising=False)
        patch.setenv("AWS_ENDPOINT_URL", url)
        patch.setenv("AWS_ACCESS_KEY_ID", "testing")
        patch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        patch.setenv("AWS_DEFAULT_REGION", "us-east-1")
        patch.setenv("AWS_CONFIG_FILE", os.devnull)
        patch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
        s3fs.S3FileSystem.clear_instance_cache()
        s3fs.S3FileSystem().mkdir(BUCKET)
        try:
            yield url
        finally:
            s3fs.S3FileSystem.clear_instance_cache()
            server.stop()


def listing(url: str) -> dict[str, str]:
    """Name -> sha256 of every object below a prefix."""
    import s3fs

    fs = s3fs.S3FileSystem()
    fs.invalidate_cache()
    root = url.removeprefix("s3://")
    return {path[len(root) + 1 :]: hashlib.sha256(fs.cat_file(path)).hexdigest()
            for path in fs.find(root)}


def local_files(folder: Path) -> dict[str, str]:
    return {path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in folder.rglob("*") if path.is_file()}


@pytest.fixture(scope="session")
def uploaded(endpoint: str, src: Path, tmp_path_factory: pytest.TempPathFactory
             ) -> dict[str, Any]:
    """`src` converted to S3 (wds, several shards), the upload order, and a local twin."""
    url = f"s3://{BUCKET}/plain.wds"
    log: list[str] = []
    parts: list[int] = []
    with pytest.MonkeyPatch.context() as patch:
        real = Uploader.shards_done

        def shards_done(self: Uploader, shards: Any) -> None:
            parts.append(len(tuple(shards)))
            real(self, shards)

        patch.setattr(Uploader, "shards_done", shards_done)
        index = convert_remote(src, url, "wds", run=RUN, log=log)
    local = tmp_path_factory.mktemp("twin") / "plain.wds"
    convert(src, local, "wds", run=RUN)
    return {"url": url, "index": index, "log": log, "parts": parts, "local": local}
