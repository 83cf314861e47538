"""readers.mixing moved to readers.plan.groups: this name works for one release, warned."""

import sys
import warnings
from importlib import import_module

warnings.warn("readers.mixing is deprecated: import from readers.plan.groups", DeprecationWarning,
              stacklevel=2)
sys.modules[__name__] = import_module("readers.plan.groups")
