"""readers.decode moved to readers.decoding.decode: a release with a warning."""

import sys
import warnings
from importlib import import_module

warnings.warn("readers.decode is deprecated: import from readers.decoding.decode",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = import_module("readers.decoding.decode")
