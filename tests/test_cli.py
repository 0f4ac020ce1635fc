"""The command line: one-line errors with exit codes, atomic outputs, untouched inputs."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import neurontrace
from neurontrace.cli.main import cli
from neurontrace.errors import SchemaMismatch

from support import KINETO


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "neurontrace.cli.main", *args],
        capture_output=True, text=True, timeout=120,
    )


def digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_convert_one_file(tmp_path: Path) -> None:
    src = KINETO / "nested-ops.json"
    before = digest(src)
    out = tmp_path / "out.parquet"
    r = run("convert", str(src), str(out))
    assert r.returncode == 0, r.stderr
    assert "9 events" in r.stderr
    assert digest(src) == before
    assert pq.read_table(out).num_rows == 9
    assert [p.name for p in tmp_path.iterdir()] == ["out.parquet"]  # no temp files left


@pytest.mark.parametrize(
    "name, needle",
    [
        ("truncated.json", "truncated"),
        ("not-a-trace.json", "not a format"),
        ("does-not-exist.json", "no such file"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_leaves_nothing(
    tmp_path: Path, name: str, needle: str
) -> None:
    out = tmp_path / "out.parquet"
    r = run("convert", str(KINETO / name), str(out))
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and needle in r.stderr and name in r.stderr
    assert "Traceback" not in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_failure_keeps_an_existing_output(tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    assert run("convert", str(KINETO / "nested-ops.json"), str(out)).returncode == 0
    before = digest(out)
    assert run("convert", str(KINETO / "truncated.json"), str(out)).returncode == 2
    assert digest(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["out.parquet"]


def test_verbose_lists_warnings(tmp_path: Path) -> None:
    r = run("convert", str(KINETO / "bare-na.json"), str(tmp_path / "o.parquet"), "-v")
    assert r.returncode == 0
    assert "bare_words: 2" in r.stderr and "N/A" in r.stderr
    quiet = run("convert", str(KINETO / "bare-na.json"), str(tmp_path / "o.parquet"))
    assert "bare_words" not in quiet.stderr and "warning(s) (see -v)" in quiet.stderr


def test_several_inputs_make_a_dataset_partitioned_by_rank(tmp_path: Path) -> None:
    a = tmp_path / "in" / "worker_rank_0.json"
    b = tmp_path / "in" / "worker_rank_1.json"
    a.parent.mkdir()
    shutil.copy(KINETO / "nested-ops.json", a)
    shutil.copy(KINETO / "nested-ops.json", b)
    out = tmp_path / "ds"
    r = run("convert", str(a), str(b), str(out))
    assert r.returncode == 0, r.stderr
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*.parquet")) == [
        "rank=0/worker_rank_0.parquet", "rank=1/worker_rank_1.parquet"
    ]
    df = neurontrace.scan(out).collect()
    assert df.group_by("rank").len().sort("rank")["len"].to_list() == [9, 9]
    # a folder as input does the same, skipping files of no known format
    (tmp_path / "in" / "notes.txt").write_text("hello")
    r = run("convert", str(tmp_path / "in"), str(tmp_path / "ds2"), "-v")
    assert r.returncode == 0 and "skipped (no known format)" in r.stderr
    assert neurontrace.scan(tmp_path / "ds2").collect().height == 18


def test_format_override(tmp_path: Path) -> None:
    odd = tmp_path / "trace.data"
    odd.write_bytes((KINETO / "nested-ops.json").read_bytes())
    r = run("convert", "--format", "kineto", str(odd), str(tmp_path / "o.parquet"))
    assert r.returncode == 0
    r = run("convert", "--format", "nope", str(odd), str(tmp_path / "o.parquet"))
    assert r.returncode == 2


def test_schema_version_is_checked(tmp_path: Path) -> None:
    out = tmp_path / "o.parquet"
    neurontrace.convert(KINETO / "nested-ops.json", out)
    t = pq.read_table(out)
    meta = dict(t.schema.metadata)
    meta[b"neurontrace.schema_version"] = b"0"
    old = tmp_path / "old.parquet"
    pq.write_table(t.replace_schema_metadata(meta), old)
    with pytest.raises(SchemaMismatch, match="schema version 0; convert it again"):
        neurontrace.scan(old)
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(pl.DataFrame({"a": [1]}).to_arrow(), foreign)
    with pytest.raises(neurontrace.BadInput, match="not written by neurontrace"):
        neurontrace.read(foreign)


def test_parquet_keeps_trace_metadata(tmp_path: Path) -> None:
    out = tmp_path / "o.parquet"
    neurontrace.convert(KINETO / "cuda-launch-chain.json", out)
    meta = neurontrace.file_metadata(out)
    assert meta["schema_version"] == int(neurontrace.SCHEMA_VERSION)
    assert meta["trace"]["distributedInfo"] == {"rank": 3, "world_size": 4}
    assert meta["source"][0]["format"] == "kineto"


def test_internal_errors_exit_1_without_traceback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    conv = sys.modules["neurontrace.convert"]  # the module (the package exports a function)

    def boom(*a: object, **k: object) -> None:
        raise RuntimeError("kaboom")

    monkeypatch.setattr(conv, "_assemble", boom)
    r = CliRunner().invoke(cli, ["convert", str(KINETO / "nested-ops.json"), str(tmp_path / "o")])
    assert r.exit_code == 1
    assert "internal error" in r.output and "kaboom" in r.output and "Traceback" not in r.output


def test_every_command_has_help_and_a_readme_section() -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    runner = CliRunner()
    for name in cli.list_commands(None):  # type: ignore[arg-type]
        r = runner.invoke(cli, [name, "--help"])
        assert r.exit_code == 0, name
        assert f"### `neurontrace {name}" in readme, f"README lacks a section for {name}"


def test_library_does_not_import_torch_or_click() -> None:
    code = "import sys, neurontrace; neurontrace.load(sys.argv[1]); " \
           "print('torch' in sys.modules, 'click' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code, str(KINETO / "nested-ops.json")],
                       capture_output=True, text=True)
    assert r.stdout.split() == ["False", "False"], r.stderr


def test_readme_schema_table_is_the_schema() -> None:
    from neurontrace.schema import markdown_table

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    assert markdown_table() in readme, "regenerate the README table from schema.markdown_table()"
