"""Deprecated home of `convert_remote`: it lives in `packer.conversion.upload` now.

Kept for a release so code written against the earlier README keeps working.
"""

import warnings

from packer.conversion.upload import convert_remote

__all__ = ["convert_remote"]

warnings.warn("packer.upload is deprecated: import convert_remote from packer.conversion.upload",
              DeprecationWarning, stacklevel=2)
