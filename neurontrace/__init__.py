"""neurontrace: profiler traces of PyTorch runs as one Parquet event table.

Library entry points::

    import neurontrace
    neurontrace.convert("trace.json", "trace.parquet")
    table = neurontrace.read("trace.parquet")      # pyarrow.Table
    lf = neurontrace.scan("trace.parquet")         # polars.LazyFrame

The library imports neither torch nor click.
"""

from __future__ import annotations

__version__ = "0.1.0"

from neurontrace.convert import Converted, convert, load
from neurontrace.errors import BadInput, NeurontraceError, SchemaMismatch
from neurontrace.schema import SCHEMA, SCHEMA_VERSION
from neurontrace.store import file_metadata, read, scan

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
