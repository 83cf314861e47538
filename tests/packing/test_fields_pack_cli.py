"""`pack convert --field/--fields/--no-fields`, `pack info` field counts, `pack verify
--source` on fields, through click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from pack_cli import main
from packer.core.fields import FieldSpec
from packer.core.index import open_dataset
from tests.helpers import csv_manifest


def pack(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def manifest(root: Path) -> Path:
    return csv_manifest(root, ("label", "caption", "score", "extra"),
                        [("0", "a dog", "0.25", "x0"), ("1", "", "1e-3", "x1"),
                         ("0", "é", "abc", "x2")])


def test_field_options_info_and_verify(tmp_path: Path) -> None:
    src = manifest(tmp_path / "src")
    out = tmp_path / "out.wds"
    result = pack("convert", src, out, "--to", "wds", "--field", "score:float",
                  "--fields", "caption,score", "-q")
    assert result.exit_code == 0, result.output
    assert "1 rejected" in result.output  # score "abc" is not a float
    index, _ = open_dataset(out)
    assert index.fields == (FieldSpec("caption", "str"), FieldSpec("score", "float"))
    info = pack("info", out)
    assert info.exit_code == 0, info.output
    assert "fields:\n  caption: str, 1 of 2 samples have a value\n" \
           "  score: float, 2 of 2 samples have a value" in info.output
    facts = json.loads(pack("info", out, "--json").output)
    assert facts["fields"]["score"] == {"type": "float", "num_present": 2}
    assert pack("verify", out, "--source", src).exit_code == 0
    src.write_text(src.read_text(encoding="utf-8").replace("a dog", "a cat"), encoding="utf-8")
    result = pack("verify", out, "--source", src)
    assert result.exit_code != 0 and "fields (caption, score) differ" in result.output


def test_no_fields_and_bad_options(tmp_path: Path) -> None:
    src = manifest(tmp_path / "src")
    result = pack("convert", src, tmp_path / "plain.lmdb", "--to", "lmdb", "--no-fields", "-q")
    assert result.exit_code == 0, result.output
    assert open_dataset(tmp_path / "plain.lmdb")[0].fields == ()
    assert "fields:" not in pack("info", tmp_path / "plain.lmdb").output
    result = pack("convert", src, tmp_path / "a", "--to", "lmdb", "--field", "score")
    assert result.exit_code == 2 and "NAME:TYPE" in result.output
    result = pack("convert", src, tmp_path / "b", "--to", "lmdb", "--field", "score:date")
    assert result.exit_code == 2 and "type must be one of" in result.output
    result = pack("convert", src, tmp_path / "c", "--to", "lmdb", "--fields", "nope", "-q")
    assert result.exit_code != 0 and "no field 'nope'" in result.output
    result = pack("convert", src, tmp_path / "d", "--to", "lmdb", "--field", "score:float",
                  "--on-error", "fail", "-q")
    assert result.exit_code != 0
    assert "line 4: column 'score' (float): 'abc' is not a number" in result.output
