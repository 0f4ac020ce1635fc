"""One derivation engine: a trace that fits in memory is the sweep's case of one bucket."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import neurontrace
from neurontrace import schema as S
from neurontrace.table import derived, spill, sweep

from support import FIXTURES

CUDA = FIXTURES / "capture" / "cuda" / "naive" / "trace.json.gz"


@pytest.fixture
def sweeps(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Path | None, int, int]]:
    """(folder, buckets, rows per bucket) of each sweep run."""
    seen: list[tuple[Path | None, int, int]] = []
    survey = sweep._Sweep._survey

    def recorded(self: Any) -> None:
        survey(self)
        seen.append((self.folder, len(self.bounds) + 1, self.size))

    monkeypatch.setattr(sweep._Sweep, "_survey", recorded)
    return seen


def test_a_trace_that_fits_is_derived_as_one_bucket_in_memory(
        sweeps: list[tuple[Path | None, int, int]]) -> None:
    table = neurontrace.load(CUDA)
    assert sweeps == [(None, 1, table.num_rows)]


def test_a_trace_past_memory_rows_is_swept_in_bucket_files(
        sweeps: list[tuple[Path | None, int, int]], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(spill.MEMORY_ROWS, "100")
    monkeypatch.setenv(sweep.BUCKET_ROWS, "50")
    table = neurontrace.load(CUDA)
    [(folder, buckets, size)] = sweeps
    assert folder is not None and not folder.exists()  # removed once written
    assert size == 50 and buckets >= table.num_rows // 50


def test_a_trace_without_events_is_one_empty_bucket(
        sweeps: list[tuple[Path | None, int, int]]) -> None:
    table = neurontrace.load(FIXTURES / "kineto" / "empty-events.json")
    assert table.num_rows == 0 and table.schema.remove_metadata() == S.SCHEMA
    assert sweeps == [(None, 1, 1)]


def test_one_bucket_and_many_give_the_same_derived_columns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    one = neurontrace.load(CUDA)
    monkeypatch.setenv(spill.MEMORY_ROWS, "1")
    monkeypatch.setenv(sweep.BUCKET_ROWS, "2")
    many = neurontrace.load(CUDA)
    for name in derived.DERIVED:
        assert many.column(name).equals(one.column(name)), name
