"""The CLI's byte-count and size parsers (property tests)."""


from decimal import Decimal

import click
from hypothesis import given
from hypothesis import strategies as st

from pack_cli._params import UNITS, parse_bytes, parse_size

# ---------------------------------------------------------------- parsing (property tests)


@given(st.integers(min_value=0, max_value=10**15), st.sampled_from(sorted(UNITS)),
       st.booleans())
def test_parse_bytes_integers(number: int, unit: str, lower: bool) -> None:
    text = f"{number}{unit.lower() if lower else unit}"
    assert parse_bytes(text) == number * UNITS[unit]


@given(st.decimals(min_value=0, max_value=10**6, places=3, allow_nan=False,
                   allow_infinity=False), st.sampled_from(["KB", "MB", "GB", "KiB", "MiB"]))
def test_parse_bytes_fractions_round_to_the_nearest_byte(number: Decimal, unit: str) -> None:
    exact = number * UNITS[unit.upper()]
    assert abs(parse_bytes(f"{number}{unit}") - exact) <= Decimal("0.5")


@given(st.text(max_size=12))
def test_parse_bytes_rejects_or_returns_a_count(text: str) -> None:
    try:
        value = parse_bytes(text)
    except click.BadParameter as exc:
        assert repr(text) in exc.message
    else:
        assert isinstance(value, int) and value >= 0


@given(st.integers(min_value=1, max_value=10**5), st.integers(min_value=1, max_value=10**5))
def test_parse_size(height: int, width: int) -> None:
    assert parse_size(f"{height}x{width}") == (height, width)
    assert parse_size(f"{height}X{width}") == (height, width)
    assert parse_size(str(height)) == (height, height)
    assert parse_size(None) is None


@given(st.text(max_size=12))
def test_parse_size_rejects_or_returns_positive_sides(text: str) -> None:
    try:
        size = parse_size(text)
    except click.BadParameter as exc:
        assert repr(text) in exc.message
    else:
        assert size is not None and min(size) > 0
