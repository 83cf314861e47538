"""Archives the archive tests build: tar, zip, a tar of tars (ImageNet's layout), tgz."""

from __future__ import annotations

import hashlib
import io
import json
import random
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

from packer import ConvertOptions
from packer.core.index import INDEX_NAME
from packer.formats.base import ShardOptions

Maker = Callable[[Path, Path], Path]
WDS = ConvertOptions(shards=ShardOptions(max_samples=4), workers=0)
RESUME = ConvertOptions(shards=ShardOptions(max_samples=4), workers=0, resume=True)


def make_tar(folder: Path, out: Path, form: int = tarfile.DEFAULT_FORMAT) -> Path:
    """`folder`'s classes as the archive's top-level folders."""
    with tarfile.open(out, "w", format=form) as tar:
        for entry in sorted(folder.iterdir()):
            tar.add(entry, arcname=entry.name)
    return out


def make_zip(folder: Path, out: Path) -> Path:
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            archive.write(path, path.relative_to(folder).as_posix())
    return out


def make_tar_of_tars(folder: Path, out: Path) -> Path:
    """ImageNet's layout: one `<class>.tar` per class folder inside the outer tar."""
    inner_dir = out.parent / f"{out.stem}-inner"
    inner_dir.mkdir()
    with tarfile.open(out, "w") as outer:
        for entry in sorted(folder.iterdir()):
            inner = inner_dir / f"{entry.name}.tar"
            with tarfile.open(inner, "w") as tar:
                for path in sorted(entry.rglob("*")):
                    tar.add(path, arcname=path.relative_to(entry).as_posix(), recursive=False)
            outer.add(inner, arcname=inner.name)
    return out


def make_tgz(folder: Path, out: Path) -> Path:
    """A .tar.gz, members in name order (tarfile.add sorts what it walks)."""
    with tarfile.open(out, "w:gz") as tar:
        for entry in sorted(folder.iterdir()):
            tar.add(entry, arcname=entry.name)
    return out


def make_tgz_any_order(folder: Path, out: Path) -> Path:
    """A .tar.gz as a plain `tar czf` writes one: each folder before what it holds, the
    files in directory order (here a seeded shuffle), not in name order."""
    paths = sorted(folder.rglob("*"))
    files = [path for path in paths if not path.is_dir()]
    random.Random(len(files)).shuffle(files)
    with tarfile.open(out, "w:gz") as tar:
        for path in [*(path for path in paths if path.is_dir()), *files]:
            tar.add(path, arcname=path.relative_to(folder).as_posix(), recursive=False)
    return out


MAKERS: dict[str, tuple[Maker, str]] = {"tar": (make_tar, ".tar"), "zip": (make_zip, ".zip"),
                                        "tars": (make_tar_of_tars, ".tar"),
                                        "tgz": (make_tgz, ".tar.gz"),
                                        "tgz-any-order": (make_tgz_any_order, ".tgz")}


def add_member(tar: tarfile.TarFile, name: str, data: bytes, kind: bytes = tarfile.REGTYPE,
               link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.size, info.type, info.linkname = len(data), kind, link
    tar.addfile(info, io.BytesIO(data) if data else None)


def without_job(folder: Path) -> dict[str, object]:
    """index.json less the job's two fingerprints (they hash the source's paths)."""
    index: dict[str, object] = json.loads((folder / INDEX_NAME).read_text())
    job = index["extra"]["job"]  # type: ignore[index]
    del job["fingerprint"], job["source"]
    return index


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
