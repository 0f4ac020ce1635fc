"""Many ranks: parallel jobs, reruns that keep unchanged outputs, concurrent runs, URIs."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from blake3 import blake3

import neurontrace
from neurontrace import schema as S
from neurontrace.errors import BadInput
from neurontrace.io.digest import content_digest

from support import KINETO

RANKS = 4
EVENTS = 9  # nested-ops.json


def run_dir(tmp_path: Path, ranks: int = RANKS) -> Path:
    d = tmp_path / "run"
    d.mkdir(parents=True)
    for r in range(ranks):
        shutil.copy(KINETO / "nested-ops.json", d / f"worker_rank_{r}.json")
    return d


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "neurontrace.cli.main", *args],
                          capture_output=True, text=True, timeout=120)


def listing(ds: Path) -> list[str]:
    return sorted(p.relative_to(ds).as_posix() for p in ds.rglob("*") if p.is_file())


def sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_content_digest_is_the_hash_of_every_byte(tmp_path: Path) -> None:
    a = tmp_path / "a.json"
    a.write_bytes(b"x" * (3 << 20) + b"y")
    before = content_digest(a)
    assert before == "blake3:" + blake3(a.read_bytes()).hexdigest()  # in one go
    st = a.stat()
    a.write_bytes(b"x" * (3 << 20) + b"z")  # same size, same mtime: still a new hash
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert content_digest(a) != before


def test_content_digest_is_blake3(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    # BLAKE3's published hash of the empty input
    want = "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
    assert content_digest(empty) == f"blake3:{want}"


def test_jobs_convert_every_rank_and_record_the_input_hash(tmp_path: Path) -> None:
    src = run_dir(tmp_path)
    out = tmp_path / "ds"
    r = cli("convert", str(src), str(out), "--jobs", "2")
    assert r.returncode == 0, r.stderr
    assert listing(out) == [f"rank={k}/worker_rank_{k}.parquet" for k in range(RANKS)]
    df = neurontrace.scan(out).collect()
    assert df.group_by(S.RANK).len().sort(S.RANK)["len"].to_list() == [EVENTS] * RANKS
    meta = neurontrace.file_metadata(out / "rank=2" / "worker_rank_2.parquet")
    assert meta["source"][0]["digest"] == content_digest(src / "worker_rank_2.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "run"]  # no litter


def test_serial_and_parallel_runs_write_the_same_tables(tmp_path: Path) -> None:
    src = run_dir(tmp_path)
    neurontrace.convert(src, tmp_path / "one", jobs=1)
    neurontrace.convert(src, tmp_path / "two", jobs=3)
    a = neurontrace.read(tmp_path / "one")
    b = neurontrace.read(tmp_path / "two")
    assert a.equals(b)


def test_a_rerun_keeps_unchanged_outputs_and_converts_changed_ones(tmp_path: Path) -> None:
    src = run_dir(tmp_path)
    out = tmp_path / "ds"
    first = neurontrace.convert(src, out, jobs=2)
    assert len(first.converted) == RANKS and not first.kept
    before = {p: sha(out / p) for p in listing(out)}
    # rank 1's trace changes (an event renamed), rank 3's is removed
    changed = src / "worker_rank_1.json"
    changed.write_text(changed.read_text().replace("aten::linear", "aten::linear2"))
    (src / "worker_rank_3.json").unlink()
    second = neurontrace.convert(src, out, jobs=2)
    assert sorted(p.name for p in second.kept) == ["worker_rank_0.parquet",
                                                   "worker_rank_2.parquet"]
    assert [p.name for p in second.converted] == ["worker_rank_1.parquet"]
    assert listing(out) == [f"rank={k}/worker_rank_{k}.parquet" for k in range(3)]
    for p in ("rank=0/worker_rank_0.parquet", "rank=2/worker_rank_2.parquet"):
        assert sha(out / p) == before[p]  # the very same file
    names = neurontrace.scan(out).filter(pl.col(S.RANK) == 1).collect()[S.NAME].to_list()
    assert "aten::linear2" in names
    assert second.rows == 3 * EVENTS


def test_force_and_other_options_convert_again(tmp_path: Path) -> None:
    src = run_dir(tmp_path, 2)
    out = tmp_path / "ds"
    neurontrace.convert(src, out)
    assert len(neurontrace.convert(src, out).kept) == 2
    assert not neurontrace.convert(src, out, force=True).kept
    again = neurontrace.convert(src, out, rank=7)  # another option: another output
    assert not again.kept
    assert listing(out) == ["rank=7/worker_rank_0.parquet", "rank=7/worker_rank_1.parquet"]


def test_an_output_of_another_schema_version_is_converted_again(tmp_path: Path) -> None:
    src = tmp_path / "t.json"
    shutil.copy(KINETO / "nested-ops.json", src)
    out = tmp_path / "t.parquet"
    neurontrace.convert(src, out)
    t = pq.read_table(out)
    meta = dict(t.schema.metadata)
    meta[S.META_SCHEMA_VERSION] = b"0"
    pq.write_table(t.replace_schema_metadata(meta), out)
    assert not neurontrace.convert(src, out).kept
    assert neurontrace.file_metadata(out)["schema_version"] == int(S.SCHEMA_VERSION)
    assert neurontrace.convert(src, out).kept  # and now it is current


def test_a_failed_run_resumes_where_it_stopped(tmp_path: Path) -> None:
    src = run_dir(tmp_path, 3)
    shutil.copy(KINETO / "truncated.json", src / "worker_rank_9.json")
    out = tmp_path / "ds"
    r = cli("convert", str(src), str(out))
    assert r.returncode == 2 and "worker_rank_9.json" in r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert not out.exists()  # nothing half-done at the destination
    partial = tmp_path / ".ds.partial"
    assert listing(partial) == [f"rank={k}/worker_rank_{k}.parquet" for k in range(3)]
    (src / "worker_rank_9.json").unlink()
    r = cli("convert", str(src), str(out), "-v")
    assert r.returncode == 0, r.stderr
    assert "3 unchanged output(s) kept" in r.stderr or r.stderr.count("kept (input") == 3
    assert listing(out) == [f"rank={k}/worker_rank_{k}.parquet" for k in range(3)]
    assert not partial.exists()


def test_a_failed_run_that_finished_no_file_leaves_no_partial_folder(tmp_path: Path) -> None:
    src = tmp_path / "run"
    src.mkdir()
    shutil.copy(KINETO / "truncated.json", src / "worker_rank_0.json")
    shutil.copy(KINETO / "truncated.json", src / "worker_rank_1.json")
    r = cli("convert", str(src), str(tmp_path / "ds"))
    assert r.returncode == 2 and "worker_rank_" in r.stderr, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_two_concurrent_converts_into_one_dataset_take_turns(tmp_path: Path) -> None:
    a = run_dir(tmp_path / "a", 3)
    b = tmp_path / "b" / "run"
    b.mkdir(parents=True)
    for r in range(2):
        shutil.copy(KINETO / "cuda-launch-chain.json", b / f"other_{r}.json")
    out = tmp_path / "ds"
    procs = [subprocess.Popen([sys.executable, "-m", "neurontrace.cli.main", "convert",
                               str(s), str(out), "--jobs", "2"], stderr=subprocess.PIPE)
             for s in (a, b, a)]
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read() if p.stderr else ""
    names = listing(out)
    # one run's complete dataset, never a mix of the two
    assert names in (
        [f"rank={k}/worker_rank_{k}.parquet" for k in range(3)],
        ["rank=3/other_0.parquet", "rank=3/other_1.parquet"],
    ), names
    neurontrace.read(out)  # every file complete
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "ds"]


def test_two_concurrent_converts_into_one_file_leave_one_complete_file(tmp_path: Path) -> None:
    out = tmp_path / "o.parquet"
    srcs = [KINETO / "nested-ops.json", KINETO / "cuda-launch-chain.json"]
    errors: list[BaseException] = []

    def go(src: Path) -> None:
        try:
            for _ in range(3):
                neurontrace.convert(src, out, force=True)
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=go, args=(s,)) for s in srcs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    got = pq.read_table(out)
    source = json.loads(got.schema.metadata[b"neurontrace.source"])[0]["path"]
    assert got.equals(neurontrace.load(source).replace_schema_metadata(got.schema.metadata))
    assert [p.name for p in tmp_path.iterdir()] == ["o.parquet"]


@pytest.mark.parametrize("uri", [False, True], ids=["path", "file-uri"])
def test_a_dataset_goes_to_a_filesystem_uri(tmp_path: Path, uri: bool) -> None:
    src = run_dir(tmp_path, 2)
    dest = tmp_path / "ds"
    target = dest.as_uri() if uri else str(dest)
    first = neurontrace.convert(src, target, jobs=2)
    assert first.rows == 2 * EVENTS
    assert listing(dest) == [f"rank={k}/worker_rank_{k}.parquet" for k in range(2)]
    assert len(neurontrace.convert(src, target).kept) == 2
    assert neurontrace.scan(dest).collect().height == 2 * EVENTS


def test_a_single_file_goes_to_a_file_uri(tmp_path: Path) -> None:
    out = tmp_path / "o.parquet"
    neurontrace.convert(KINETO / "nested-ops.json", out.as_uri())
    assert pq.read_metadata(out).num_rows == EVENTS
    assert neurontrace.convert(KINETO / "nested-ops.json", out.as_uri()).kept


def test_an_unknown_uri_or_executor_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="nope://x"):
        neurontrace.convert(KINETO / "nested-ops.json", "nope://x/o.parquet")
    with pytest.raises(BadInput, match="--executor"):
        neurontrace.convert(run_dir(tmp_path), tmp_path / "ds", executor="spark")
