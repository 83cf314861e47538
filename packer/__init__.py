"""Offline side of the toolkit: turn a folder of small images into one packed dataset.

`packer` never imports torch, so converting works on machines without it.
"""

from packer.convert import convert
from packer.encode import EncodeOptions
from packer.errors import PackError
from packer.index import Index, SampleTable, read_index

__all__ = ["EncodeOptions", "Index", "PackError", "SampleTable", "convert", "read_index"]
__version__ = "0.1.0"
