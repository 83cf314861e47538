"""describe's Description names every key it returns: the required ones always there, the
optional ones only where the dataset has them."""

from __future__ import annotations

from pathlib import Path

import packer
from tests.helpers import pack_wds


def test_describe_returns_exactly_the_keys_its_description_types(tmp_path: Path) -> None:
    description = packer.describe(pack_wds(tmp_path, 6, 3, min_side=8, max_side=10))
    typed = packer.Description
    assert typed.__required_keys__ <= set(description), "a required key is missing"
    assert set(description) <= typed.__required_keys__ | typed.__optional_keys__, (
        "describe returns a key its Description does not name")
    assert set(description) - typed.__required_keys__ == {"image_types", "wids_index"}
    assert description["num_samples"] == 6 and sum(description["classes"].values()) == 6
