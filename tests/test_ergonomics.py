"""Ergonomics of convert, export and raw inputs (issue 18), through the command line.

- ``convert IN`` alone writes beside IN (``trace.json.gz`` -> ``trace.parquet``);
- an ``OUT/`` spelled with a slash, or an existing folder, is a dataset folder;
- ``export PATH OUT.json.gz`` writes gzip, read back with every column;
- a command given a raw trace converts it once into a private cache keyed by the
  input's content hash, reused while the bytes are the same.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

from neurontrace import analyses, load
from neurontrace import schema as S
from neurontrace.cli.convert import default_output
from neurontrace.cli.main import cli
from neurontrace.loading import CACHE_ENV, _trim, cache_folder

from support import FIXTURES, KINETO

NAIVE = FIXTURES / "capture" / "cuda" / "naive" / "trace.json.gz"
OTHER = KINETO / "nested-ops.json"


def invoke(*args: object, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], env=env)


def run(*args: object, cache: Path) -> subprocess.CompletedProcess[str]:
    """The command line in a process of its own (notes go to the stderr descriptor)."""
    return subprocess.run([sys.executable, "-m", "neurontrace.cli.main", *map(str, args)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, CACHE_ENV: str(cache)})


def one_line_exit_2(r: Result, needle: str) -> None:
    assert r.exit_code == 2, r.output
    assert r.stderr.count("\n") == 1 and needle in r.stderr, r.stderr


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """``runs/trace.json.gz``: a copy of a real CUDA capture."""
    (tmp_path / "runs").mkdir()
    shutil.copy(NAIVE, tmp_path / "runs" / "trace.json.gz")
    return tmp_path / "runs"


# -- convert IN, with no OUT ----------------------------------------------------------

@pytest.mark.parametrize("given, expected", [
    ("runs/trace.json.gz", "runs/trace.parquet"),
    ("runs/trace.json", "runs/trace.parquet"),
    ("runs/TRACE.JSON.GZ", "runs/TRACE.parquet"),
    ("rank0.pt.trace.json", "rank0.pt.trace.parquet"),
    ("profile.ntff", "profile.ntff.parquet"),
    ("runs/demo/", "runs/demo.parquet"),
    (".json", ".json.parquet"),
])
def test_the_default_output_drops_gz_and_json_and_adds_parquet(given: str,
                                                              expected: str) -> None:
    assert default_output(given) == Path(expected)


def test_the_default_output_of_the_current_folder_is_beside_it() -> None:
    assert default_output(".") == Path(os.path.abspath(".") + ".parquet")


def test_convert_in_alone_writes_beside_it_and_a_rerun_keeps_it(runs: Path) -> None:
    before = (runs / "trace.json.gz").read_bytes()
    r = invoke("convert", runs / "trace.json.gz")
    assert r.exit_code == 0, r.output
    assert listing(runs) == ["trace.json.gz", "trace.parquet"]
    rows = analyses.events(NAIVE).collect().height
    assert pq.read_metadata(runs / "trace.parquet").num_rows == rows
    inode = os.stat(runs / "trace.parquet").st_ino
    again = invoke("convert", runs / "trace.json.gz")
    assert again.exit_code == 0 and "1 unchanged output(s) kept" in again.stderr
    assert os.stat(runs / "trace.parquet").st_ino == inode
    assert (runs / "trace.json.gz").read_bytes() == before


def test_convert_in_alone_never_replaces_a_file_it_did_not_write(runs: Path) -> None:
    (runs / "trace.parquet").write_text("my own notes")
    one_line_exit_2(invoke("convert", runs / "trace.json.gz"), "not written by neurontrace")
    assert (runs / "trace.parquet").read_text() == "my own notes"
    assert listing(runs) == ["trace.json.gz", "trace.parquet"]


def test_convert_of_a_folder_alone_writes_a_dataset_beside_it(runs: Path) -> None:
    shutil.copy(OTHER, runs / "other.json")
    r = invoke("convert", f"{runs}/")
    assert r.exit_code == 0, r.output
    out = runs.parent / "runs.parquet"
    assert listing(out) == ["rank=0", "rank=0/other.parquet", "rank=0/trace.parquet"]
    assert sorted(os.listdir(runs)) == ["other.json", "trace.json.gz"]


# -- OUT/ and an existing folder ------------------------------------------------------

def test_an_out_with_a_trailing_slash_is_a_dataset_folder(runs: Path) -> None:
    out = runs.parent / "out"
    r = invoke("convert", runs / "trace.json.gz", f"{out}/")
    assert r.exit_code == 0, r.output
    assert listing(out) == ["rank=0", "rank=0/trace.parquet"]
    assert not [p for p in runs.parent.iterdir() if p.name.startswith(".")]
    ops = invoke("ops", out, "--json")
    assert ops.exit_code == 0 and json.loads(ops.stdout)


def test_an_existing_empty_folder_is_a_dataset_folder(runs: Path) -> None:
    out = runs.parent / "out"
    out.mkdir()
    r = invoke("convert", runs / "trace.json.gz", out)
    assert r.exit_code == 0, r.output
    assert listing(out) == ["rank=0", "rank=0/trace.parquet"]
    again = invoke("convert", runs / "trace.json.gz", out)
    assert again.exit_code == 0 and "1 unchanged output(s) kept" in again.stderr


def test_an_existing_folder_of_other_files_is_refused_untouched(runs: Path) -> None:
    out = runs.parent / "out"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    one_line_exit_2(invoke("convert", runs / "trace.json.gz", out), "not a neurontrace dataset")
    assert listing(out) == ["notes.txt"]


# -- export to .json.gz ---------------------------------------------------------------

def test_export_to_json_gz_writes_gzip_that_reads_back_every_column(tmp_path: Path) -> None:
    out = tmp_path / "timeline.json.gz"
    r = invoke("export", NAIVE, out)
    assert r.exit_code == 0, r.output
    raw = out.read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    doc = json.loads(gzip.decompress(raw))
    assert doc["displayTimeUnit"] == "ns" and doc["traceEvents"]
    before = analyses.events(NAIVE).collect()
    after = pl.from_arrow(load(out))
    assert isinstance(after, pl.DataFrame) and after.height == before.height
    for c in S.NAMES:
        a, b = before.get_column(c), after.get_column(c)
        assert a.cast(b.dtype).to_list() == b.to_list(), c
    plain = tmp_path / "timeline.json"
    assert invoke("export", NAIVE, plain).exit_code == 0
    assert gzip.decompress(raw) == plain.read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["timeline.json", "timeline.json.gz"]


# -- raw inputs: a cached conversion --------------------------------------------------

@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "home" / ".cache" / "neurontrace"
    monkeypatch.setenv(CACHE_ENV, str(folder))
    return folder


def cached_files(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.parquet")) if cache.exists() else []


def test_a_second_command_on_a_raw_trace_reuses_its_cached_conversion(runs: Path,
                                                                      cache: Path) -> None:
    first = run("ops", runs / "trace.json.gz", cache=cache)
    assert first.returncode == 0, first.stderr
    assert "converted once into" in first.stderr
    [entry] = cached_files(cache)
    assert pq.read_metadata(entry).num_rows == analyses.events(NAIVE).collect().height
    inode = os.stat(entry).st_ino
    second = run("ops", runs / "trace.json.gz", cache=cache)
    assert second.returncode == 0, second.stderr
    assert "converted" not in second.stderr  # read from the cache, not converted again
    assert second.stdout == first.stdout
    assert cached_files(cache) == [entry] and os.stat(entry).st_ino == inode
    assert listing(runs) == ["trace.json.gz"]  # nothing beside the input


@pytest.mark.parametrize("command", ["report", "export"])
def test_report_and_export_use_the_cache_too(command: str, runs: Path, cache: Path,
                                             tmp_path: Path) -> None:
    args = [command, runs / "trace.json.gz"] + ([tmp_path / "t.json"] if command == "export"
                                                 else [])
    first = run(*args, cache=cache)
    assert first.returncode == 0 and "converted once into" in first.stderr, first.stderr
    [entry] = cached_files(cache)
    inode = os.stat(entry).st_ino
    second = run(*args, cache=cache)
    assert second.returncode == 0 and "converted" not in second.stderr, second.stderr
    assert cached_files(cache) == [entry] and os.stat(entry).st_ino == inode


def test_a_raw_trace_whose_bytes_changed_is_converted_again(runs: Path, cache: Path) -> None:
    trace = runs / "trace.json.gz"
    assert run("ops", trace, cache=cache).returncode == 0
    [old] = cached_files(cache)
    st = os.stat(trace)
    trace.write_bytes(gzip.compress(OTHER.read_bytes()))  # other bytes, same time
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns))
    changed = run("ops", trace, cache=cache)
    assert changed.returncode == 0, changed.stderr
    assert "converted once into" in changed.stderr
    assert len(cached_files(cache)) == 2 and old in cached_files(cache)
    fresh = run("ops", trace, cache=Path("off"))
    assert changed.stdout == fresh.stdout  # the new bytes' figures, not the old ones'


def test_the_cache_and_its_files_are_private(runs: Path, cache: Path) -> None:
    assert invoke("ops", runs / "trace.json.gz").exit_code == 0
    assert stat.S_IMODE(os.stat(cache).st_mode) == 0o700
    [entry] = cached_files(cache)
    assert stat.S_IMODE(os.stat(entry).st_mode) == 0o600
    assert os.listdir(cache) == [entry.name]  # no lock, no temporary folder left


def test_a_cache_folder_open_to_others_is_not_used(runs: Path, cache: Path) -> None:
    cache.mkdir(parents=True)
    os.chmod(cache, 0o755)
    r = invoke("ops", runs / "trace.json.gz")
    assert r.exit_code == 0, r.output
    assert os.listdir(cache) == []


def test_the_cache_turned_off_writes_nothing(runs: Path, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    before = listing(tmp_path)
    r = invoke("ops", runs / "trace.json.gz")
    assert r.exit_code == 0, r.output
    assert listing(tmp_path) == before


def test_the_cache_is_in_the_users_cache_folder_by_default(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_folder() == tmp_path / "xdg" / "neurontrace"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_folder() == tmp_path / ".cache" / "neurontrace"


def test_a_bad_raw_trace_is_one_line_exit_2_and_caches_nothing(tmp_path: Path,
                                                              cache: Path) -> None:
    bad = tmp_path / "truncated.json"
    shutil.copy(KINETO / "truncated.json", bad)
    before = bad.read_bytes()
    one_line_exit_2(invoke("ops", bad), "truncated")
    assert bad.read_bytes() == before
    assert not cache.exists() or os.listdir(cache) == []


def test_a_full_cache_drops_the_conversions_used_least_recently(tmp_path: Path) -> None:
    for i, name in enumerate(["old", "mid", "new"]):
        (tmp_path / f"{name}.parquet").write_bytes(b"x" * 100)
        os.utime(tmp_path / f"{name}.parquet", ns=(i * 10**9, i * 10**9))
    _trim(tmp_path, keep=tmp_path / "new.parquet", limit=250)
    assert sorted(os.listdir(tmp_path)) == ["mid.parquet", "new.parquet"]
    _trim(tmp_path, keep=tmp_path / "new.parquet", limit=50)  # the one just written stays
    assert sorted(os.listdir(tmp_path)) == ["new.parquet"]
