"""Start-up time of our own processes (the command line and its worker processes).

pyarrow, the first time it converts a Python value (``pa.array(list)``, a scalar given
to a compute function), imports pandas when pandas is installed, to check whether the
value is a pandas object: about a quarter of a second, a twentieth of converting a
300 MB trace. Our processes never hand pandas objects to pyarrow, so they let pyarrow
make that check once while pandas cannot be imported; pyarrow remembers the answer.
The block is lifted at once: pandas stays importable for anything else. The library
itself never does this (a user's process may pass pandas objects to pyarrow).
"""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType


class _NoPandas(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> ModuleSpec | None:
        if name == "pandas" or name.startswith("pandas."):
            raise ImportError("pandas is not needed here")
        return None


def arrow_without_pandas() -> None:
    """Have pyarrow decide, once, that pandas is absent (unless it is already loaded)."""
    if "pandas" in sys.modules:
        return
    block = _NoPandas()
    sys.meta_path.insert(0, block)
    try:
        import pyarrow as pa

        pa.scalar(0)  # the first conversion of a Python value: pyarrow looks for pandas
    finally:
        sys.meta_path.remove(block)
