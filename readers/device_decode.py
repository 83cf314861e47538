"""readers.device_decode moved to readers.decoding.device_decode: a release with a warning."""

import sys
import warnings
from importlib import import_module

warnings.warn("readers.device_decode is deprecated: import from readers.decoding.device_decode",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = import_module("readers.decoding.device_decode")
