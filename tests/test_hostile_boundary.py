"""The error boundary against hostile input: every failure is one line on stderr, exit 2
for bad input and 1 only for a bug, no traceback, the input untouched, nothing left.

Covers Polars panics (a ``BaseException``), foreign and corrupt Parquet given to the
analyses, Neuron Explorer tables with columns of unexpected types, Neuron readers forced
with ``--format`` onto the wrong input, file names holding a newline, missing files, and
click's usage errors.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner, Result

import neurontrace
from neurontrace import schema as S
from neurontrace.cli.main import cli
from neurontrace.errors import is_panic, one_line, shown

from support import FIXTURES, KINETO

NEURON = FIXTURES / "neuron"
RMSNORM = NEURON / "explorer_rmsnorm_vnc_0"
ANALYSES = ("ops", "gaps", "copies", "steps", "report", "compare", "export")


# -- helpers ------------------------------------------------------------------------------

def digests(path: Path) -> dict[str, str]:
    """sha256 of a file, or of every file under a folder, by relative name."""
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p.relative_to(path) if p != path else p.name):
            hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def invoke(*args: object) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


def run(*args: object) -> subprocess.CompletedProcess[str]:
    """The real entry point, in a fresh process (what click prints, what Rust prints)."""
    return subprocess.run([sys.executable, "-m", "neurontrace.cli.main", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


def assert_one_line(code: int, stderr: str, want: int, *needles: str) -> None:
    """Exit ``want``, exactly one line on stderr holding every needle, no traceback."""
    assert code == want, stderr
    assert stderr.count("\n") == 1 and stderr.endswith("\n"), stderr
    assert "Traceback" not in stderr and "panicked" not in stderr, stderr
    for needle in needles:
        assert needle in stderr, (needle, stderr)


def command_args(cmd: str, path: Path, tmp: Path) -> list[object]:
    """Arguments that make ``cmd`` read ``path`` (compare: against a good file)."""
    if cmd == "export":
        return [cmd, path, tmp / "out.json"]
    if cmd == "compare":
        return [cmd, ours(tmp / "good"), path]
    return [cmd, path]


def ours(folder: Path) -> Path:
    """A file of ours (converted from a small Kineto fixture) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "ours.parquet"
    if not out.exists():
        neurontrace.convert(KINETO / "nested-ops.json", out)
    return out


def rewrite(path: Path, change: Callable[[pa.Table], pa.Table], **options: object) -> None:
    """Write ``change(table)`` over ``path``, keeping the file's key-value metadata."""
    t = pq.read_table(path)
    pq.write_table(change(t).replace_schema_metadata(t.schema.metadata), path, **options)


def real_panic_type() -> type[BaseException]:
    """The PanicException class, taken from a real Polars panic (encoding bytes as JSON
    is not implemented in Polars: it panics)."""
    frame = pl.DataFrame({"b": [b"\xff"]})
    try:
        frame.select(pl.struct("b").struct.json_encode())
    except BaseException as e:  # noqa: BLE001 - the panic is what is wanted
        assert is_panic(e), e
        return type(e)
    raise AssertionError("Polars did not panic; find another real panic for this test")


def panicking_parquet(tmp: Path) -> Path:
    """A file of ours with one byte of a ``start_ns`` page changed such that Polars
    panics reading it (found by trying bytes; its footer is intact, so the lazy scan
    opens it and the panic comes when an analysis collects)."""
    table = pq.read_table(ours(tmp / "src"))
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="none", use_dictionary=False,
                   column_encoding={S.START_NS: "DELTA_BINARY_PACKED"})
    data = buf.getvalue()
    chunk = pq.read_metadata(io.BytesIO(data)).row_group(0).column(
        table.schema.get_field_index(S.START_NS))
    start = chunk.data_page_offset
    for pos in range(start, start + chunk.total_compressed_size):
        for value in (0x00, 0x7F, 0xFF, 0x01):
            bad = bytearray(data)
            bad[pos] = value
            try:
                pl.read_parquet(io.BytesIO(bytes(bad)), columns=[S.START_NS])
            except BaseException as e:  # noqa: BLE001
                if not is_panic(e):
                    continue
                out = tmp / "panics.parquet"
                out.write_bytes(bytes(bad))
                return out
    raise AssertionError("no byte of the start_ns page makes Polars panic")


# -- Polars panics ----------------------------------------------------------------------

def test_polars_panic_on_a_corrupt_page_is_bad_input_in_one_line(tmp_path: Path) -> None:
    bad = panicking_parquet(tmp_path)
    before = digests(tmp_path)
    r = run("report", bad)  # a fresh process: Rust's panic report goes to descriptor 2
    assert_one_line(r.returncode, r.stderr, 2, shown(bad), "corrupt Parquet file")
    assert digests(tmp_path) == before


def test_polars_panic_on_a_corrupt_page_is_bad_input_for_every_analysis(
        tmp_path: Path) -> None:
    bad = panicking_parquet(tmp_path)
    before = digests(bad)
    for cmd in ("ops", "gaps", "steps", "report", "compare"):
        r = invoke(*command_args(cmd, bad, tmp_path))
        assert_one_line(r.exit_code, r.stderr, 2, bad.name, "corrupt Parquet file")
    assert digests(bad) == before


def test_polars_panic_with_a_sound_input_is_a_bug_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    panic = real_panic_type()
    good = ours(tmp_path)
    before = digests(good)
    from neurontrace import analyses

    def boom(*_a: object, **_k: object) -> None:
        raise panic("assertion `left == right` failed\n  left: 4\n right: 0")

    monkeypatch.setattr(analyses, "ops", boom)
    r = invoke("ops", good)
    assert_one_line(r.exit_code, r.stderr, 1, "internal error", "PanicException",
                    "this is a bug")
    assert digests(good) == before


def test_keyboard_interrupt_keeps_its_meaning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from neurontrace import analyses

    def interrupted(*_a: object, **_k: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(analyses, "ops", interrupted)
    r = invoke("ops", ours(tmp_path))
    assert_one_line(r.exit_code, r.stderr, 130, "interrupted")


# -- foreign and corrupt Parquet ---------------------------------------------------------

@pytest.mark.parametrize("cmd", ANALYSES)
def test_foreign_parquet_is_refused_in_one_line(tmp_path: Path, cmd: str) -> None:
    foreign = tmp_path / "foreign.parquet"
    pq.write_table(pa.table({"a": [1, 2]}), foreign)
    before = digests(foreign)
    r = invoke(*command_args(cmd, foreign, tmp_path))
    assert_one_line(r.exit_code, r.stderr, 2, "foreign.parquet", "not written by neurontrace")
    assert digests(foreign) == before
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("cmd", ANALYSES)
def test_truncated_parquet_of_ours_is_refused_in_one_line(tmp_path: Path, cmd: str) -> None:
    whole = ours(tmp_path / "src").read_bytes()
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(whole[: len(whole) // 2])
    r = invoke(*command_args(cmd, cut, tmp_path))
    assert_one_line(r.exit_code, r.stderr, 2, "cut.parquet", "not a Parquet file")
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("cmd", ANALYSES)
def test_our_metadata_with_a_column_of_another_type_is_refused(
        tmp_path: Path, cmd: str) -> None:
    odd = tmp_path / "odd.parquet"
    shutil.copy(ours(tmp_path / "src"), odd)
    rewrite(odd, lambda t: t.set_column(
        t.schema.get_field_index(S.START_NS), pa.field(S.START_NS, pa.string()),
        t.column(S.START_NS).cast(pa.string())))
    before = digests(odd)
    r = invoke(*command_args(cmd, odd, tmp_path))
    assert_one_line(r.exit_code, r.stderr, 2, "odd.parquet", "'start_ns' is string, not int64")
    assert digests(odd) == before


def test_our_metadata_without_a_column_is_refused(tmp_path: Path) -> None:
    odd = tmp_path / "odd.parquet"
    shutil.copy(ours(tmp_path / "src"), odd)
    rewrite(odd, lambda t: t.drop([S.DUR_NS]))
    r = invoke("report", odd)
    assert_one_line(r.exit_code, r.stderr, 2, "odd.parquet", "no column 'dur_ns'")


def test_flipped_bytes_in_the_footer_give_one_line(tmp_path: Path) -> None:
    data = bytearray(ours(tmp_path / "src").read_bytes())
    footer_len = int.from_bytes(data[-8:-4], "little")
    for i in range(len(data) - 8 - footer_len + 2, len(data) - 8, 7):
        data[i] ^= 0xFF
    flipped = tmp_path / "flipped.parquet"
    flipped.write_bytes(bytes(data))
    r = run("ops", flipped)  # pyarrow's message here ends in a newline: folded
    assert_one_line(r.returncode, r.stderr, 2, "flipped.parquet")


def test_flipped_bytes_in_pages_are_bad_input_or_read(tmp_path: Path) -> None:
    """Bytes flipped after the footer was written: either the pages still decode (the
    values changed, nothing can tell) or the file is named as corrupt; never a bug."""
    src = ours(tmp_path / "src")
    data = src.read_bytes()
    body = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    refused = 0
    for k, pos in enumerate(range(4, body, max(1, body // 40))):
        bad = bytearray(data)
        bad[pos] ^= 0x5A
        path = tmp_path / f"flip{k}.parquet"
        path.write_bytes(bytes(bad))
        r = invoke("report", path)
        assert r.exit_code in (0, 2), r.stderr
        if r.exit_code == 2:
            assert_one_line(r.exit_code, r.stderr, 2, path.name)
            refused += 1
    assert refused  # some flip hit a header or a page


def test_footer_with_a_column_name_that_is_not_utf8_is_refused(tmp_path: Path) -> None:
    odd = tmp_path / "odd.parquet"
    shutil.copy(ours(tmp_path / "src"), odd)
    rewrite(odd, lambda t: t.append_column("z\u00e9", pa.array([1] * t.num_rows)))
    data = odd.read_bytes()
    footer = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
    at = data.index(b"z\xc3\xa9", footer)
    odd.write_bytes(data[:at] + b"z\xe7A" + data[at + 3:])  # a cut UTF-8 sequence
    r = invoke("ops", odd)
    assert_one_line(r.exit_code, r.stderr, 2, "odd.parquet", "utf-8")


def test_dataset_folder_with_one_bad_file_names_that_file(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    (ds / "rank=0").mkdir(parents=True)
    (ds / "rank=1").mkdir()
    good = ours(tmp_path / "src")
    shutil.copy(good, ds / "rank=0" / "a.parquet")
    (ds / "rank=1" / "b.parquet").write_bytes(good.read_bytes()[:100])
    before = digests(ds)
    for cmd in ("ops", "report", "export"):
        r = invoke(*command_args(cmd, ds, tmp_path))
        assert_one_line(r.exit_code, r.stderr, 2, "b.parquet")
    assert digests(ds) == before
    assert not (tmp_path / "out.json").exists()


def test_dataset_folder_with_a_corrupt_page_names_that_file(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    ds.mkdir()
    neurontrace.convert(KINETO / "nested-ops.json", ds / "a.parquet", rank=1)  # 2 ranks
    shutil.move(panicking_parquet(tmp_path / "p"), ds / "b.parquet")
    r = invoke("report", ds)
    assert_one_line(r.exit_code, r.stderr, 2, "b.parquet", "corrupt Parquet file")


# -- Neuron Explorer tables with columns of unexpected types ----------------------------

def explorer_with(tmp: Path, table: str, change: Callable[[pa.Table], pa.Table]) -> Path:
    """A copy of the rmsnorm Explorer folder with one table rewritten by ``change``."""
    folder = tmp / "explorer_rmsnorm_vnc_0"
    shutil.copytree(RMSNORM, folder)
    t = pq.read_table(folder / table)
    pq.write_table(change(t), folder / table)
    return folder


def retyped(column: str, values: Callable[[pa.ChunkedArray], pa.Array]
            ) -> Callable[[pa.Table], pa.Table]:
    def change(t: pa.Table) -> pa.Table:
        new = values(t.column(column))
        return t.set_column(t.schema.get_field_index(column), pa.field(column, new.type), new)
    return change


def as_text(c: pa.ChunkedArray) -> pa.Array:
    return c.combine_chunks().cast(pa.string())


def as_json_text(c: pa.ChunkedArray) -> pa.Array:
    return pa.array([None if v is None else json.dumps(v) for v in c.to_pylist()])


def garbage(c: pa.ChunkedArray) -> pa.Array:
    return pa.array(["abc"] * len(c))


def as_list(c: pa.ChunkedArray) -> pa.Array:
    return pa.array([[v] for v in c.to_pylist()])


def as_null(c: pa.ChunkedArray) -> pa.Array:
    return pa.nulls(len(c))


def as_bytes(c: pa.ChunkedArray) -> pa.Array:
    return pa.array([b"\xff\x00"] * len(c), pa.binary())


def test_explorer_start_ts_as_text_of_digits_reads_the_same(tmp_path: Path) -> None:
    want = neurontrace.load(RMSNORM).drop_columns([S.ROW]).to_pylist()
    folder = explorer_with(tmp_path, "SystemProfileEvents.parquet",
                           retyped("start_ts", as_text))
    got = neurontrace.load(folder).drop_columns([S.ROW]).to_pylist()
    assert sorted(map(str, got)) == sorted(map(str, want))


def test_explorer_flow_ids_as_json_text_read_as_the_list(tmp_path: Path) -> None:
    want = neurontrace.load(RMSNORM).column(S.FLOW_IDS).to_pylist()
    folder = explorer_with(tmp_path, "SystemProfileEvents.parquet",
                           retyped("flow_id", as_json_text))
    assert neurontrace.load(folder).column(S.FLOW_IDS).to_pylist() == want
    assert any(want)


@pytest.mark.parametrize("table, column, change, code, needle", [
    # required columns of a type that cannot be read: refused
    ("SystemProfileEvents.parquet", "start_ts", as_list, 2, "'start_ts' is List(Int64)"),
    ("SystemProfileEvents.parquet", "name", as_list, 2, "'name' is List(String)"),
    ("Instruction_0.parquet", "start_ts", as_bytes, 2, "'start_ts' is Binary"),
    ("DmaPacket.parquet", "start_ts", lambda c: pa.array([{"a": 1}] * len(c)), 2,
     "'start_ts' is Struct"),
    # required columns missing: refused
    ("SystemProfileEvents.parquet", "name", None, 2, "no name column"),
    ("ActiveTime.parquet", "start_ts", None, 2, "no start_ts column"),
    # text where an int is expected, null-typed, lists and bytes in optional columns:
    # read, with warnings
    ("SystemProfileEvents.parquet", "start_ts", garbage, 0, ""),
    ("SystemProfileEvents.parquet", "start_ts", as_null, 0, ""),
    ("SystemProfileEvents.parquet", "duration_ns", as_text, 0, ""),
    ("SystemProfileEvents.parquet", "process_id", as_list, 0, ""),
    ("SystemProfileEvents.parquet", "flow_id", as_json_text, 0, ""),
    ("SystemProfileEvents.parquet", "flow_id", garbage, 0, ""),
    ("SystemProfileEvents.parquet", "nc_idx", as_bytes, 0, ""),
    ("SystemProfileEvents.parquet", "worker_gid", as_bytes, 0, ""),  # a panic before
    ("Instruction_1.parquet", "end_ts", garbage, 0, ""),
    ("Instruction_1.parquet", "engine", as_list, 0, ""),
    ("DmaPacket.parquet", "transfer_bytes", lambda c: pa.array([2**64 - 1] * len(c),
                                                                pa.uint64()), 0, ""),
    ("ExecutionInfo.parquet", "execution_start_ts", as_list, 0, ""),
    ("ExecutionInfo.parquet", "execution_end_ts", garbage, 0, ""),
])
def test_explorer_columns_of_unexpected_types_are_read_or_refused_never_a_bug(
        tmp_path: Path, table: str, column: str,
        change: Callable[[pa.ChunkedArray], pa.Array] | None, code: int, needle: str) -> None:
    folder = explorer_with(tmp_path, table, retyped(column, change) if change else
                           lambda t: t.drop([column]))
    before = digests(folder)
    r = invoke("ops", "--layer", "device", folder)
    if code == 2:
        assert_one_line(r.exit_code, r.stderr, 2, needle)
    else:
        assert r.exit_code == 0, r.stderr
        assert "Traceback" not in r.stderr and "error" not in r.stderr, r.stderr
    assert digests(folder) == before
    out = tmp_path / "o.parquet"
    r = invoke("convert", folder, out)
    assert r.exit_code == code, r.stderr
    assert out.exists() == (code == 0)


def test_explorer_value_that_is_no_number_is_a_warning(tmp_path: Path) -> None:
    folder = explorer_with(tmp_path, "Instruction_1.parquet", retyped("end_ts", garbage))
    r = invoke("convert", folder, tmp_path / "o.parquet", "-v")
    assert r.exit_code == 0, r.stderr
    assert "explorer_bad_value" in r.stderr and "'end_ts'" in r.stderr


def test_explorer_bytes_column_is_kept_in_args_as_hex(tmp_path: Path) -> None:
    folder = explorer_with(tmp_path, "Instruction_0.parquet", lambda t: t.append_column(
        "blob", pa.array([b"\xff\x00"] * t.num_rows, pa.binary())))
    df = pl.from_arrow(neurontrace.load(folder))
    assert isinstance(df, pl.DataFrame)
    args = df.filter(pl.col(S.CATEGORY) == "Instruction").get_column(S.ARGS).to_list()
    assert sum(json.loads(a).get("blob") == "ff00" for a in args) == 3


def test_explorer_metadata_that_is_not_utf8_is_ignored(tmp_path: Path) -> None:
    """Key-value metadata Polars cannot decode (it panics) is not read at all."""
    def odd_metadata(t: pa.Table) -> pa.Table:
        field = t.schema.field(0).with_metadata({b"k": b"\xff\xfe"})
        return t.set_column(0, field, t.column(0)).replace_schema_metadata(
            {b"neurontrace.trace": b"\xff\xfe"})

    folder = explorer_with(tmp_path, "Metadata.parquet", odd_metadata)
    r = invoke("convert", folder, tmp_path / "o.parquet")
    assert r.exit_code == 0, r.stderr


def test_explorer_duplicate_column_is_refused(tmp_path: Path) -> None:
    folder = explorer_with(tmp_path, "ActiveTime.parquet", lambda t: t.append_column(
        "engine", pa.array(["x"] * t.num_rows)))
    r = invoke("ops", "--layer", "device", folder)
    assert_one_line(r.exit_code, r.stderr, 2, "ActiveTime.parquet", "'engine' appears")


# -- Neuron readers forced onto the wrong input -----------------------------------------

@pytest.mark.parametrize("fmt, needle", [
    ("neuron-device-json", "not a Neuron device profile"),
    ("neuron-explorer", "not a Neuron Explorer folder"),
    ("neuron-system-json", "trace_event"),
    ("neuron-live-json", "events"),
    ("neuron-summary-json", "not a summary-json"),
])
def test_neuron_format_forced_on_a_kineto_trace_is_refused(
        tmp_path: Path, fmt: str, needle: str) -> None:
    trace = tmp_path / "kineto.json"
    shutil.copy(KINETO / "nested-ops.json", trace)
    before = digests(trace)
    out = tmp_path / "o.parquet"
    r = invoke("convert", "--format", fmt, trace, out)
    assert_one_line(r.exit_code, r.stderr, 2, "kineto.json", needle)
    assert not out.exists()
    assert digests(trace) == before


def test_device_profile_numbers_out_of_range_are_warned_not_a_bug(tmp_path: Path) -> None:
    doc = (NEURON / "device_profile_ns.json").read_text()
    odd = tmp_path / "device_profile_nc_0.json"
    odd.write_text(doc.replace('"timestamp": 50000', '"timestamp": 1e400', 1)
                   .replace('"duration": 40000', f'"duration": {2**70}', 1))
    assert odd.read_text() != doc
    r = invoke("convert", odd, tmp_path / "o.parquet", "-v")
    assert r.exit_code == 0, r.stderr
    assert "bad_ts" in r.stderr


# -- file names, missing files, usage errors ---------------------------------------------

def test_file_name_with_a_newline_is_shown_escaped_on_one_line(tmp_path: Path) -> None:
    name = tmp_path / "bad\nname.json"
    shutil.copy(KINETO / "truncated.json", name)
    before = digests(name)
    r = run("ops", name)
    assert_one_line(r.returncode, r.stderr, 2, repr(str(name)), "truncated")
    assert digests(name) == before
    missing = tmp_path / "gone\nfile.parquet"
    r = run("report", missing)
    assert_one_line(r.returncode, r.stderr, 2, repr(str(missing)), "no such file")


def test_file_name_with_a_newline_inside_a_dataset_folder(tmp_path: Path) -> None:
    ds = tmp_path / "ds"
    ds.mkdir()
    shutil.copy(ours(tmp_path / "src"), ds / "a.parquet")
    (ds / "b\x1b[31m\n.parquet").write_bytes(b"PAR1 not really")
    r = invoke("ops", ds)
    assert_one_line(r.exit_code, r.stderr, 2, "\\x1b[31m\\n.parquet", "not a Parquet file")


@pytest.mark.parametrize("cmd", [*ANALYSES, "convert"])
def test_missing_file_given_to_every_command(tmp_path: Path, cmd: str) -> None:
    missing = tmp_path / "missing.json"
    args = ([cmd, missing, tmp_path / "o.parquet"] if cmd == "convert"
            else command_args(cmd, missing, tmp_path))
    r = invoke(*args)
    assert_one_line(r.exit_code, r.stderr, 2, "missing.json", "no such file")
    assert sorted(p.name for p in tmp_path.iterdir()) == (["good"] if cmd == "compare"
                                                           else [])


@pytest.mark.parametrize("args, needle", [
    (["ops"], "Missing argument 'PATH'. (see neurontrace ops --help)"),
    (["ops", "x.json", "--bogus"], "No such option '--bogus'"),
    (["ops", "--top", "many", "x.json"], "'--top'"),
    (["nosuchcommand"], "No such command 'nosuchcommand'. (see neurontrace --help)"),
])
def test_usage_errors_are_one_line(args: list[str], needle: str) -> None:
    r = run(*args)
    assert_one_line(r.returncode, r.stderr, 2, "neurontrace: error: ", needle)
    assert "Usage:" not in r.stderr and "Try '" not in r.stderr


def test_a_folder_where_a_file_belongs_is_named_in_one_line(tmp_path: Path) -> None:
    r = run("export", ours(tmp_path / "src"), tmp_path)  # OUT: click.Path(dir_okay=False)
    assert_one_line(r.returncode, r.stderr, 2, f"neurontrace: error: {tmp_path}: is a directory")


def test_help_keeps_clicks_usage_text() -> None:
    r = run("ops", "--help")
    assert r.returncode == 0 and r.stdout.startswith("Usage: neurontrace ops") and not r.stderr
    r = run()
    assert r.returncode == 0 and "Commands:" in r.stdout and not r.stderr


def test_one_line_folds_and_escapes() -> None:
    assert one_line("a\nb\r\n\n  c  ") == "a / b / c"
    assert one_line("x\x1b[2Jy\tz") == "x\\x1b[2Jy\\tz"
    assert one_line("\n".join("abcdefg")) == "a / b / c / d (+3 lines)"
    assert shown(Path("plain é.json")) == "plain é.json"
    assert shown("a\nb") == "'a\\nb'"


@pytest.mark.parametrize("name", ["missing.json", "new\nline.json"])
def test_click_path_check_for_a_missing_file_is_the_one_line_form(
        tmp_path: Path, name: str) -> None:
    import click

    from neurontrace.cli.main import usage_line

    missing = tmp_path / name
    with click.Context(click.Command("ops")) as ctx:
        param = click.Argument(["path"], type=click.Path(exists=True))
        with pytest.raises(click.BadParameter) as e:
            param.type.convert(str(missing), param, ctx)
    assert usage_line(e.value) == f"neurontrace: error: {shown(missing)}: does not exist"
