"""readers.crop_decode moved to readers.decoding.crop_decode: a release with a warning."""

import sys
import warnings
from importlib import import_module

warnings.warn("readers.crop_decode is deprecated: import from readers.decoding.crop_decode",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = import_module("readers.decoding.crop_decode")
