"""readers.in_memory moved to readers.ram.copies: this name works for one release, warned."""

import sys
import warnings
from importlib import import_module

warnings.warn("readers.in_memory is deprecated: import from readers.ram.copies", DeprecationWarning,
              stacklevel=2)
sys.modules[__name__] = import_module("readers.ram.copies")
