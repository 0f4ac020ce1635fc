"""Settings for our own processes (the command line and its worker processes).

**Memory.** Polars allocates through jemalloc, which by default keeps freed pages for
about ten seconds before giving them back to the system; a conversion frees hundreds of
megabytes of temporaries per second, which then stay resident. :func:`before_imports`
has a background thread of jemalloc's give them back after one second: on the 300 MB
benchmark trace the peak went from about 730 to 670 MiB at no cost in time (giving
them back at once, ``dirty_decay_ms:0``, reached 575 MiB but cost 0.2 s). It must run
before Polars is imported, and a user's own setting wins.

**Start-up time.** pyarrow, the first time it converts a Python value
(``pa.array(list)``, a scalar given to a compute function), imports pandas when pandas
is installed, to check whether the value is a pandas object: about a quarter of a
second, a tenth of converting a 300 MB trace. Our processes never hand pandas objects to
pyarrow, so they let pyarrow make that check once while pandas cannot be imported
(:func:`arrow_without_pandas`); pyarrow remembers the answer. The block is lifted at once:
pandas stays importable for anything else. The library itself never does this (a user's
process may pass pandas objects to pyarrow).

**Idle BLAS threads.** NumPy's OpenBLAS starts a thread per CPU when NumPy is imported,
and each spins for about a tenth of a second before it sleeps, though nothing here
multiplies matrices: on two cores that took 0.1-0.2 s of CPU from the decoding.
:func:`before_imports` keeps OpenBLAS to the calling thread (before NumPy is imported;
a user's own setting wins).
"""

from __future__ import annotations

import importlib.abc
import os
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


#: jemalloc's options as the copy linked into Polars reads them.
_JEMALLOC_CONF = "_RJEM_MALLOC_CONF"


def before_imports() -> None:
    """The settings that must come before Polars and NumPy are imported (each only when
    that one is not yet): Polars' allocator returns freed pages soon, OpenBLAS keeps to
    one thread."""
    if "polars" not in sys.modules:
        os.environ.setdefault(_JEMALLOC_CONF,
                              "background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0")
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def arrow_without_pandas() -> None:
    """Have pyarrow decide, once, that pandas is absent (unless it is already loaded)."""
    if "pandas" in sys.modules:
        return
    # not None in sys.modules: Cython's ``import pandas`` (pyarrow's) takes that as pandas
    block = _NoPandas()
    sys.meta_path.insert(0, block)
    try:
        import pyarrow as pa

        pa.scalar(0)  # the first conversion of a Python value: pyarrow looks for pandas
    finally:
        sys.meta_path.remove(block)
