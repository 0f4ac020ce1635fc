"""Shared test helpers: fixture paths, the corpus, and one way to render a table as text."""

from __future__ import annotations

import decimal
import gzip
import json
import os
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

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


#: A JSON number (ASCII digits, at least one before the exponent); ``.5`` and ``7.`` too.
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def reference_ns(text: str) -> tuple[int | None, bool]:
    """Decimal microsecond text (quotes and space around it allowed) to nanoseconds by the
    standard library's decimal arithmetic, rounded half to even: (value, exact). None
    where the text is no number or the value is not inside int64's range (its minimum
    excluded, as :mod:`neurontrace.readers.units` says); exact is then True. The
    independent side of the time conversion's tests."""
    t = text.strip().strip('"').strip()
    if _NUMBER.fullmatch(t) is None:
        return None, True
    with decimal.localcontext() as ctx:
        ctx.prec, ctx.Emax, ctx.Emin = len(t) + 40, decimal.MAX_EMAX, decimal.MIN_EMIN
        ns = Decimal(t).scaleb(3)
        if ns and ns.adjusted() > 30:  # far past int64: no huge integer made
            return None, True
        whole = ns.to_integral_value(rounding=decimal.ROUND_HALF_EVEN)
    if not -(1 << 63) < int(whole) < 1 << 63:
        return None, True
    return int(whole), whole == ns


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


def us_to_ns(us: Any) -> int:
    """Kineto's microseconds (a ``Decimal`` from :func:`raw_complete_events`) as ns."""
    return int(Decimal(us) * 1000)


def raw_complete_events(path: Path) -> list[dict[str, Any]]:
    """The complete (``X``) events of a Kineto trace, read with the standard library
    (times as exact ``Decimal``): the independent side of the corpus checks."""
    raw = path.read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw,
                     parse_float=Decimal)
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    return [e for e in evs if isinstance(e, dict) and e.get("ph") == "X"]
