"""Worker processes give exactly what the sequential reader gives, quirks and all."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import neurontrace
from neurontrace.diagnostics import Diagnostics
from neurontrace.readers import jsonstream, parallel


def trace(path: Path, n: int, tricky_every: int) -> None:
    events = []
    for i in range(n):
        name = "a}, {b" if i % tricky_every == 0 else f"op{i % 7}"
        events.append(
            f'{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": 1, "tid": {i % 3}, '
            f'"ts": {i}.{i % 1000:03d}, "dur": 0.500, "args": {{"External id": {i}}}}}'
        )
        if i == n // 2:
            events.append('{"ph": "X", "cat": "cpu_op", "name": "na", "pid": 1, "tid": 0, '
                          '"ts": 1.000, "dur": 1.000, "args": {"x": N/A}}')
    path.write_text('{"traceEvents": [\n' + ",\n".join(events) + '\n], "after": 1}')


@pytest.mark.parametrize("tricky_every", [10**9, 997])
def test_workers_match_sequential(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  tricky_every: int) -> None:
    src = tmp_path / "t.json"
    trace(src, 20000, tricky_every)
    monkeypatch.setattr(jsonstream, "BLOCK", 64 << 10)
    monkeypatch.setenv("NEURONTRACE_WORKERS", "1")
    d1 = Diagnostics()
    one = pl.from_arrow(neurontrace.load(src, diag=d1))
    monkeypatch.setattr(parallel, "MIN_BYTES", 0)
    monkeypatch.setenv("NEURONTRACE_WORKERS", "2")
    d2 = Diagnostics()
    two = pl.from_arrow(neurontrace.load(src, diag=d2))
    assert isinstance(one, pl.DataFrame) and isinstance(two, pl.DataFrame)
    assert one.height == 20001
    assert one.equals(two)
    assert d1.counts == d2.counts
    meta = neurontrace.load(src).schema.metadata[b"neurontrace.trace"]
    assert json.loads(meta) == {"after": 1}
