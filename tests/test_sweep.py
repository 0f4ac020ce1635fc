"""A trace too large to hold is derived bucket by bucket, with the one-bucket result.

``NEURONTRACE_MEMORY_ROWS=1`` puts every trace of more than one row in bucket files
(:mod:`neurontrace.table.sweep`); buckets of a few rows make spans stay open across many
buckets, flows bind to spans of earlier buckets and links join rows far apart.
"""

from __future__ import annotations

import glob
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import neurontrace
from neurontrace import schema as S
from neurontrace.diagnostics import Diagnostics
from neurontrace.table import spill, sweep

from support import FIXTURES, corpus_dir

#: Fixtures that are no trace (refused, or a description of a format).
REFUSED = {"truncated.json", "not-a-trace.json", "neuron-explorer-schema.json"}
CASES = sorted(
    str(Path(p).relative_to(FIXTURES))
    for p in [*glob.glob(str(FIXTURES / "kineto" / "*.json*")),
              *glob.glob(str(FIXTURES / "capture" / "*" / "*" / "trace.json.gz")),
              *glob.glob(str(FIXTURES / "neuron" / "*.json")),
              *glob.glob(str(FIXTURES / "neuron" / "explorer_*"))]
    if Path(p).name not in REFUSED
)


def _load(path: Path) -> tuple[pa.Table, Diagnostics]:
    diag = Diagnostics()
    return neurontrace.load(path, diag=diag), diag


@pytest.fixture
def swept(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The bucket count of each sweep in files (a sweep in memory is one bucket)."""
    counts: list[int] = []
    survey = sweep._Sweep._survey

    def counted(self: Any) -> None:
        survey(self)
        if self.folder is not None:
            counts.append(len(self.bounds) + 1)
        else:
            assert len(self.bounds) == 0

    monkeypatch.setattr(sweep._Sweep, "_survey", counted)
    return counts


def _equal(path: Path, monkeypatch: pytest.MonkeyPatch, bucket: int) -> int:
    """Convert ``path`` both ways and compare; the number of rows."""
    want, want_diag = _load(path)
    with monkeypatch.context() as m:
        m.setenv(spill.MEMORY_ROWS, "1")
        m.setenv(sweep.BUCKET_ROWS, str(bucket))
        got, diag = _load(path)
    assert got.schema == want.schema
    for name in want.schema.names:
        assert got.column(name).equals(want.column(name)), name
    assert got.schema.metadata == want.schema.metadata  # warnings counted alike
    assert diag.counts == want_diag.counts
    return want.num_rows


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("bucket", [1, 3, 64])
def test_buckets_give_the_one_bucket_table(name: str, bucket: int, swept: list[int],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = FIXTURES / name
    rows = _equal(path, monkeypatch, bucket)
    assert len(swept) == (rows > 1)  # swept in files (past one row)
    if bucket == 1 and rows >= 4:
        assert swept[0] > 1


@pytest.mark.parametrize("name", CASES)
def test_a_bucket_in_memory_written_in_row_ranges_gives_the_same_table(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A trace held in memory (one bucket) is read back and written a row range of
    ``bucket_rows()`` at a time: ranges of 3 rows give the table of one range."""
    path = FIXTURES / name
    want, want_diag = _load(path)
    seen: list[tuple[Path | None, int]] = []
    run = sweep._Sweep.run

    def counted(self: Any) -> Any:
        out = run(self)
        seen.append((self.folder, self._ranges()))
        return out

    with monkeypatch.context() as m:
        m.setenv(sweep.BUCKET_ROWS, "3")
        m.setattr(sweep._Sweep, "run", counted)
        got, diag = _load(path)
    assert seen and all(folder is None for folder, _ in seen)  # in memory
    if want.num_rows > 3:
        assert max(n for _, n in seen) > 1  # in several row ranges
    for column in want.schema.names:
        assert got.column(column).equals(want.column(column)), column
    assert diag.counts == want_diag.counts


def test_a_real_trace_is_split_into_many_buckets(swept: list[int],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The real CUDA trace: nesting, flows, External id and correlation links, steps."""
    _equal(FIXTURES / "capture" / "cuda" / "naive" / "trace.json.gz", monkeypatch, 7)
    assert swept[0] >= 10


def test_many_flow_events_are_swept_in_files(tmp_path: Path, swept: list[int],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows within the in-memory limit but flow events past it: the flow events are
    held a bucket at a time too, with the table the sweep in memory gives."""
    spans = [{"ph": "X", "cat": "cpu_op", "name": f"op{i}", "pid": 1, "tid": 1,
              "ts": 10 * i, "dur": 5} for i in range(4)]
    flows = [{"ph": ph, "cat": "ac2g", "name": "f", "id": i, "pid": 1, "tid": 1,
              "ts": 10 * (i % 4) + 1, **({"bp": "e"} if ph == "f" else {})}
             for i in range(12) for ph in ("s", "f")]
    path = tmp_path / "flows.json"
    path.write_text(json.dumps({"traceEvents": spans + flows}))
    want, _ = _load(path)
    assert swept == []  # in memory
    with monkeypatch.context() as m:
        m.setenv(spill.MEMORY_ROWS, "10")  # 4 rows, 24 flow events
        got, _ = _load(path)
    assert swept and swept[0] >= 1  # in files
    assert got.equals(want)
    assert got.column(S.FLOW_IDS).null_count < got.num_rows  # flows were bound


def test_nothing_is_left_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(spill.MEMORY_ROWS, "1")
    monkeypatch.setenv(sweep.BUCKET_ROWS, "5")
    out = tmp_path / "out"
    out.mkdir()
    neurontrace.convert(FIXTURES / "capture" / "cuda" / "naive" / "trace.json.gz",
                        out / "t.parquet")
    assert [p.name for p in out.iterdir()] == ["t.parquet"]


def test_narrow_columns_go_to_disk_past_the_limit(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "x.spill.arrow"
    table = neurontrace.load(FIXTURES / "kineto" / "nested-ops.json")
    batches = table.select([c for c in table.schema.names if c not in ("row", "rank")]
                           ).to_batches(max_chunksize=2)
    narrow, flows = spill.spill_all(batches, path, limit=3)
    files = [p for p in narrow.pieces if isinstance(p, Path)]
    assert len(files) == 1 and files[0].exists()
    assert narrow.rows == table.num_rows
    assert sum(f.height for f in narrow.frames()) == table.num_rows
    starts = [x for f in narrow.frames() for x in f.get_column(S.START_NS).to_list()]
    assert starts == table.column(S.START_NS).to_pylist()
    assert flows.rows == 0  # no flow events given
    narrow.discard()
    flows.discard()
    assert not files[0].exists()


@pytest.mark.skipif(corpus_dir() is None, reason="set NEURONTRACE_CORPUS (opt-in)")
def test_corpus_traces_sweep_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    folder = corpus_dir()
    assert folder is not None
    paths = sorted(folder.rglob("*.json*"))
    assert paths
    for path in paths:
        _equal(path, monkeypatch, 997)


def test_parallel_chunks_spill_their_narrow_columns(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path) -> None:
    """Chunks decoded in worker processes write their narrow columns (and flow events)
    to files too."""
    import gzip

    from neurontrace.readers.kineto import KinetoReader
    from neurontrace.table import chunks
    from neurontrace.workers import splitting

    path = tmp_path / "trace.json"
    path.write_bytes(gzip.decompress(
        (FIXTURES / "kineto" / "cpu-mlp-training.json.gz").read_bytes()))
    want, want_diag = _load(path)
    monkeypatch.setattr(splitting, "MIN_CHUNK", 1)
    monkeypatch.setattr(splitting, "MAX_CHUNKS", 3)
    monkeypatch.setenv("NEURONTRACE_READ_WORKERS", "3")
    monkeypatch.setenv(spill.MEMORY_ROWS, "30")  # a few rows a chunk, then files
    monkeypatch.setenv(sweep.BUCKET_ROWS, "200")
    pieces: list[object] = []
    frames = spill.SpilledFrames.frames

    def seen(self: spill.SpilledFrames) -> Any:
        pieces.extend(self.pieces)
        return frames(self)

    monkeypatch.setattr(spill.SpilledFrames, "frames", seen)
    got, diag = _load(path)
    files = {p.name.rsplit(".", 2)[-2] for p in pieces if isinstance(p, Path)}
    assert files == {"narrow", "flows"}  # rows and flow events past the limit: in files
    narrow = {p for p in pieces if isinstance(p, Path) and p.name.endswith(".narrow.arrow")}
    assert len(narrow) == len(chunks.plan(KinetoReader(), path)) >= 3  # one per chunk
    assert got.equals(want)
    assert diag.counts == want_diag.counts
