"""Shared test helpers: fixture paths, the corpus, and one way to render a table as text."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "fixtures"
KINETO = FIXTURES / "kineto"


def corpus_dir() -> Path | None:
    value = os.environ.get("NEURONTRACE_CORPUS")
    if not value:
        return None
    path = Path(value)
    return path if path.is_dir() else None


GOLDEN_COLUMNS = (
    "row", "layer", "category", "name", "kind", "start_ns", "dur_ns", "self_ns", "parent",
    "depth", "pid", "tid", "track", "device", "stream", "external_id", "correlation",
    "flow_ids", "framework_row", "link", "bytes", "step", "rank", "args",
)


def render(table: pa.Table, limit: int | None = None) -> str:
    """A readable, stable text form of an event table: one block per row."""
    meta = table.schema.metadata or {}
    lines = [f"rows: {table.num_rows}"]
    warnings = meta.get(b"neurontrace.warnings")
    if warnings:
        lines.append(f"warnings: {warnings.decode()}")
    rows = table.to_pylist()
    for r in rows[:limit]:
        fields = []
        for c in GOLDEN_COLUMNS:
            v = r.get(c)
            if v is None or v == []:
                continue
            fields.append(f"{c}={v!r}")
        lines.append("  ".join(fields))
    if limit is not None and len(rows) > limit:
        lines.append(f"... {len(rows) - limit} more rows")
    return "\n".join(lines) + "\n"
