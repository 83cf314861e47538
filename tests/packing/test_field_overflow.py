"""A number beyond float64's range in a manifest: json.loads and float() read 1e400 as
infinity, a different number, so it is refused with the place named, not stored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packer.core.fields import FieldValueError, decode_value, parse_text
from tests.helpers import assert_one_line_error, csv_manifest, png_bytes, random_image, run_pack


@pytest.mark.parametrize(("kind", "text"), [("float", "1e400"), ("float", "-2e308"),
                                            ("json", '{"a": [1e400]}'), ("floats", "[[1, 1e999]]")])
def test_a_cell_beyond_float64_is_refused(kind: str, text: str) -> None:
    with pytest.raises(FieldValueError, match="beyond float64's range"):
        parse_text(kind, text)  # type: ignore[arg-type]


@pytest.mark.parametrize("text", ["inf", "-Infinity", "+INF", "1e308"])
def test_infinity_spelled_out_and_large_finite_numbers_are_kept(text: str) -> None:
    assert decode_value("float", parse_text("float", text)) == float(text)
    assert decode_value("json", parse_text("json", "[1e308, Infinity]")) == [1e308, float("inf")]


def test_a_csv_row_beyond_float64_is_a_reject_naming_row_and_column(tmp_path: Path) -> None:
    manifest = csv_manifest(tmp_path / "src", ("label", "score"), [("0", "0.5"), ("0", "1e400")])
    result = run_pack("convert", manifest, tmp_path / "out", "--to", "lmdb",
                      "--field", "score:float")
    assert result.exit_code == 0, result.output
    (reject,) = map(json.loads, (tmp_path / "out" / "rejects.jsonl").read_text().splitlines())
    assert "line 3" in reject["reason"] and "score" in reject["reason"], reject["reason"]
    assert "beyond float64's range" in reject["reason"]


def test_a_jsonl_line_beyond_float64_stops_with_its_line(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(png_bytes(random_image(8, 8, seed=0)))
    manifest = tmp_path / "m.jsonl"
    manifest.write_text('{"path": "a.png", "label": 0, "score": 0.5}\n'
                        '{"path": "a.png", "label": 0, "score": 1e400}\n')
    result = run_pack("convert", manifest, tmp_path / "out", "--to", "wds")
    assert_one_line_error(result, 1, f"{manifest}:2", "beyond float64's range")
