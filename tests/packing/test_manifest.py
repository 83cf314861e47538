"""Manifest sources: CSV (path,label + other columns) and JSONL, names or integer labels."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from pack_cli import main
from packer import ConvertOptions, convert
from packer.api import verify
from packer.core.index import INDEX_NAME, REJECTS_NAME, open_dataset
from packer.errors import BadInputError, SourceError
from packer.source.scan import scan
from tests.helpers import jpeg_bytes, png_bytes, random_image, tree_hashes

WORKERS0 = ConvertOptions(workers=0)


@pytest.fixture
def images(tmp_path: Path) -> Path:
    """data/imgs/{cat,dog}/*.jpg plus one PNG; manifests go in data/."""
    root = tmp_path / "data"
    for n in range(6):
        kind = "cat" if n % 2 else "dog"
        path = root / "imgs" / kind / f"{kind}{n}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(jpeg_bytes(random_image(40 + n, 30 + n, seed=n)))
    (root / "imgs" / "odd one.png").write_bytes(png_bytes(random_image(32, 32, seed=99)))
    return root


def rows(root: Path) -> list[tuple[str, str]]:
    """(path relative to `root`, class name) of every image under root/imgs."""
    out = []
    for path in sorted((root / "imgs").rglob("*")):
        if path.is_file():
            rel = path.relative_to(root).as_posix()
            out.append((rel, "cat" if "cat" in path.name else "dog"))
    return out


def write_csv(path: Path, entries: list[tuple[str, str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["id", "path", "split", "label", "notes"])
        for n, (rel, label) in enumerate(entries):
            writer.writerow([n, rel, "train", label, "a, quoted; note"])
    return path


def write_jsonl(path: Path, entries: list[tuple[str, object]]) -> Path:
    lines = [json.dumps({"path": rel, "label": label, "extra": [1, 2]}) for rel, label in entries]
    path.write_text("\n".join(lines) + "\n\n", encoding="utf-8")  # a blank line is fine
    return path


def test_csv_with_class_names_and_extra_columns(images: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    manifest = write_csv(images / "list.csv", rows(images))
    before = tree_hashes(images)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # relative paths resolve against the manifest's folder
    index = convert(manifest, tmp_path / "out", "wds", run=WORKERS0)
    assert index.class_names == ("cat", "dog")
    assert index.num_samples == 7 and index.num_rejected == 0
    _, table = open_dataset(tmp_path / "out")
    assert table.keys() == [rel.rsplit(".", 1)[0] for rel, _ in rows(images)]
    assert table.labels.tolist() == [0 if label == "cat" else 1 for _, label in rows(images)]
    assert verify(tmp_path / "out", manifest).ok
    assert tree_hashes(images) == before


def test_jsonl_with_integer_labels(images: Path, tmp_path: Path) -> None:
    entries: list[tuple[str, object]] = [(rel, n % 3) for n, (rel, _) in enumerate(rows(images))]
    manifest = write_jsonl(images / "list.jsonl", entries)
    index = convert(manifest, tmp_path / "out", "lmdb", run=WORKERS0)
    assert index.class_names == ("0", "1", "2")
    _, table = open_dataset(tmp_path / "out")
    by_key = {rel.rsplit(".", 1)[0]: label for rel, label in entries}
    assert {table.key(i): int(table.labels[i]) for i in range(len(table))} == by_key


def test_integer_labels_as_text_in_csv(images: Path) -> None:
    manifest = write_csv(images / "ints.csv", [(rel, str(n % 2)) for n, (rel, _) in
                                                enumerate(rows(images))])
    source = scan(manifest)
    assert source.class_names == ("0", "1")
    assert [item.label for item in source.items] == [n % 2 for n in range(7)]


def test_absolute_paths_and_paths_outside_the_manifest_folder(images: Path,
                                                              tmp_path: Path) -> None:
    lists = tmp_path / "lists"
    lists.mkdir()
    entries = [(str(images / rel), label) for rel, label in rows(images)[:3]]
    entries.append(("../data/" + rows(images)[3][0], rows(images)[3][1]))
    manifest = write_csv(lists / "list.csv", entries)
    index = convert(manifest, tmp_path / "out", "wds", run=WORKERS0)
    assert index.num_samples == 4 and index.num_rejected == 0
    assert verify(tmp_path / "out", manifest).ok


def test_manifest_and_folder_give_the_same_dataset(src: Path, tmp_path: Path) -> None:
    entries = [(str(p.relative_to(src)), p.parent.name) for p in sorted(src.rglob("*.*"))]
    manifest = write_csv(tmp_path / "list.csv", [(str(src / rel), label) for rel, label in entries])
    by_manifest = scan(manifest)
    by_folder = scan(src)
    assert by_manifest.class_names == by_folder.class_names
    assert [item.label for item in by_manifest.items] == [item.label for item in by_folder.items]
    assert [Path(item.path) for item in by_manifest.items] == \
        [Path(item.path) for item in by_folder.items]


def test_unknown_class_and_missing_file_are_rejected(images: Path, tmp_path: Path) -> None:
    entries = [*rows(images), ("imgs/cat/nope.jpg", "cat"), ("imgs/dog/dog0.jpg", ""),
               ("imgs/cat/cat1.jpg", "7")]
    # Named labels: every name is a class, so only an empty label or an out-of-range
    # integer is unknown. (The last two rows repeat existing files, so their keys would
    # also clash: the label is checked first.)
    manifest = write_csv(images / "list.csv", entries)
    before = tree_hashes(images)
    index = convert(manifest, tmp_path / "out", "hdf5", run=WORKERS0)
    assert tree_hashes(images) == before
    lines = (tmp_path / "out" / REJECTS_NAME).read_text(encoding="utf-8").splitlines()
    reasons = sorted((Path(row["path"]).name, row["reason"]) for row in map(json.loads, lines))
    assert reasons == [
        ("cat1.jpg", "unknown class '7' in the manifest"),
        ("dog0.jpg", "unknown class '' in the manifest"),
        ("nope.jpg", "missing file: it does not exist"),
    ]
    assert index.num_rejected == 3 and index.num_samples == 7
    assert verify(tmp_path / "out", manifest).ok


def test_missing_file_fails_under_fail_policy(images: Path, tmp_path: Path) -> None:
    manifest = write_jsonl(images / "list.jsonl", [*rows(images), ("imgs/gone.jpg", "cat")])
    with pytest.raises(BadInputError, match=r"gone\.jpg"):
        convert(manifest, tmp_path / "out", "wds", run=ConvertOptions(workers=0,
                                                                     on_error="fail"))
    assert not (tmp_path / "out" / INDEX_NAME).exists()


def test_unknown_class_fails_under_fail_policy(images: Path, tmp_path: Path) -> None:
    manifest = write_jsonl(images / "list.jsonl", [*rows(images)[:2], ("imgs/odd one.png", -1)])
    with pytest.raises(BadInputError, match="odd one"):
        convert(manifest, tmp_path / "out", "wds", run=ConvertOptions(workers=0,
                                                                     on_error="fail"))
    assert not (tmp_path / "out" / INDEX_NAME).exists()


def test_windows_manifest_with_bom_and_crlf(images: Path, tmp_path: Path) -> None:
    text = "path,label\r\n" + "".join(f'"{rel}",{label}\r\n' for rel, label in rows(images))
    manifest = images / "win.csv"
    manifest.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    assert len(scan(manifest).items) == 7


@pytest.mark.parametrize(("name", "text", "message"), [
    ("bad.csv", "file,class\nx.jpg,cat\n", "header row must name `path` and `label`"),
    ("bad.jsonl", '{"path": "x.jpg", "label": "cat"}\nnot json\n', "bad.jsonl:2"),
    ("bad.jsonl", '{"path": "x.jpg"}\n', "bad.jsonl:1"),
    ("bad.csv", "path,label,x,x\nx.jpg,cat,1,2\n", "names column 'x' more than once"),
    ("bad.csv", "path,path,label\nx.jpg,y.jpg,cat\n", "names column 'path' more than once"),
    ("bad.csv", "path,label\nx.jpg,cat\ny.jpg\n", "bad.csv:3: the row has fewer cells"),
    ("bad.csv", "path,label\nx.jpg,cat,extra\n", "bad.csv:2: the row has more cells"),
])
def test_malformed_manifest_is_a_source_error(tmp_path: Path, name: str, text: str,
                                              message: str) -> None:
    manifest = tmp_path / name
    manifest.write_text(text, encoding="utf-8")
    with pytest.raises(SourceError, match=message.replace("`", ".")):
        scan(manifest)
    result = CliRunner().invoke(main, ["convert", str(manifest), str(tmp_path / "out"),
                                       "--to", "wds"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_duplicate_rows_are_rejected_not_packed_twice(images: Path, tmp_path: Path) -> None:
    entries = rows(images)
    manifest = write_csv(images / "dup.csv", [*entries, entries[0]])
    source = scan(manifest)
    assert len(source.items) == 7
    assert [r.reason.split(" ")[0] for r in source.rejects] == ["duplicate"]


@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_file_names_with_separators_survive_the_manifest(tmp_path: Path, kind: str) -> None:
    names = ["a,b.jpg", "sep\u2028x.jpg", "new\nline.jpg", "form\x0cfeed.jpg", "q\"uote.jpg"]
    root = tmp_path / "data"
    (root / "i").mkdir(parents=True)
    for n, name in enumerate(names):
        (root / "i" / name).write_bytes(jpeg_bytes(random_image(20, 20, seed=n)))
    entries = [(f"i/{name}", "c") for name in names]
    if kind == "csv":
        manifest = write_csv(root / "list.csv", entries)
    else:
        lines = [json.dumps({"path": p, "label": c}, ensure_ascii=False) for p, c in entries]
        manifest = root / "list.jsonl"
        manifest.write_text("\r\n".join(lines) + "\r\n", encoding="utf-8")
    source = scan(manifest)
    assert source.rejects == []
    assert sorted(item.key for item in source.items) == sorted(f"i/{n[:-4]}" for n in names)
    index = convert(manifest, tmp_path / "out", "wds", run=WORKERS0)
    assert index.num_samples == len(names)


@pytest.mark.timeout(30)
def test_a_huge_integer_label_is_a_source_error_not_a_billion_classes(images: Path) -> None:
    manifest = write_jsonl(images / "ids.jsonl", [(rel, n) for n, (rel, _) in
                                                  enumerate(rows(images))] +
                           [("imgs/cat/cat1.jpg", 10**12)])
    with pytest.raises(SourceError, match="not a class id"):
        scan(manifest)


def test_null_label_is_an_unknown_class_not_a_class_named_none(images: Path) -> None:
    entries: list[tuple[str, object]] = [(rel, label) for rel, label in rows(images)]
    entries[0] = (entries[0][0], None)
    source = scan(write_jsonl(images / "null.jsonl", entries))
    assert source.class_names == ("cat", "dog")
    assert [r.reason for r in source.rejects] == ["unknown class '' in the manifest"]
