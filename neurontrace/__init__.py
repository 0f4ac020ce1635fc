"""neurontrace: profiler traces of PyTorch runs as one Parquet event table.

Library entry points::

    import neurontrace
    neurontrace.convert("trace.json", "trace.parquet")
    table = neurontrace.read("trace.parquet")      # pyarrow.Table
    lf = neurontrace.scan("trace.parquet")         # polars.LazyFrame

The library imports neither torch nor click. The names above are imported on first use,
so that ``neurontrace.capture`` (which runs next to a training job, maybe in a container
without the analysis stack) loads neither pyarrow nor polars.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: public name -> the module under ``neurontrace`` that defines it.
_EXPORTS: dict[str, str] = {
    "SCHEMA": "schema",
    "SCHEMA_VERSION": "schema",
    "BadInput": "errors",
    "NeurontraceError": "errors",
    "SchemaMismatch": "errors",
    "Converted": "convert",
    "convert": "convert",
    "load": "convert",
    "file_metadata": "io.store",
    "read": "io.store",
    "scan": "io.store",
}


class _Package(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module 'neurontrace' has no attribute {name!r}")
        value = getattr(importlib.import_module(f"neurontrace.{module}"), name)
        setattr(self, name, value)
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        # Importing the submodule ``neurontrace.convert`` binds it here; the package's
        # ``convert`` stays the function of that name, as it was when imported eagerly.
        if isinstance(value, types.ModuleType) and _EXPORTS.get(name) == name:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

if TYPE_CHECKING:
    from neurontrace.convert import Converted, convert, load
    from neurontrace.errors import BadInput, NeurontraceError, SchemaMismatch
    from neurontrace.io.store import file_metadata, read, scan
    from neurontrace.schema import SCHEMA, SCHEMA_VERSION

__all__ = [
    "SCHEMA",
    "SCHEMA_VERSION",
    "BadInput",
    "Converted",
    "NeurontraceError",
    "SchemaMismatch",
    "__version__",
    "convert",
    "file_metadata",
    "load",
    "read",
    "scan",
]
