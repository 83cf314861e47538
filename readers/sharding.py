"""readers.sharding moved to readers.plan.chunks: this name works for one release, warned."""

import sys
import warnings
from importlib import import_module

warnings.warn("readers.sharding is deprecated: import from readers.plan.chunks", DeprecationWarning,
              stacklevel=2)
sys.modules[__name__] = import_module("readers.plan.chunks")
