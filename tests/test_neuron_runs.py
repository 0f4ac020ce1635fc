"""TorchNeuron run folders and raw captures (converted by a stand-in neuron-explorer)."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import neurontrace
from neurontrace import schema as S
from neurontrace.cli.main import cli
from neurontrace.readers.neuron.raw import pair_neff

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "neuron"
RUN = FIX / "run_two_ranks"


def test_a_run_folder_writes_one_file_per_rank_with_rank_instance_and_pid(
        tmp_path: Path) -> None:
    out = tmp_path / "ds"
    result = neurontrace.convert(RUN, out)
    assert sorted(p.relative_to(out).as_posix() for p in result.outputs) == [
        "rank=0/i-0abc_pid_101.parquet", "rank=1/i-0abc_pid_202.parquet"]
    df = neurontrace.scan(out).collect()
    per_rank = df.group_by(S.RANK).agg(pl.col(S.INSTANCE_ID).unique(),
                                      pl.col(S.PID).unique()).sort(S.RANK)
    assert per_rank.rows() == [(0, ["i-0abc"], [101]), (1, ["i-0abc"], [202])]


def test_a_rank_merges_its_framework_trace_with_its_neuron_outputs(tmp_path: Path) -> None:
    result = neurontrace.convert(RUN, tmp_path / "ds")
    df = pl.read_parquet(tmp_path / "ds" / "rank=0" / "i-0abc_pid_101.parquet")
    names = dict(df.select(S.ROW, S.NAME).iter_rows())
    rt = df.filter(pl.col(S.NAME) == "nrt_execute").row(0, named=True)
    hw = df.filter(pl.col(S.NAME) == "nc_exec_running").row(0, named=True)
    assert (names[rt[S.FRAMEWORK_ROW]], rt[S.LINK]) == ("aten::mul", "nesting")
    assert (names[hw[S.FRAMEWORK_ROW]], hw[S.LINK]) == ("aten::mul", "time")
    mul = df.filter(pl.col(S.NAME) == "aten::mul")
    assert mul.height == 1 and mul[S.CATEGORY].item() == "cpu_op"  # the Kineto op, once
    assert rt[S.START_NS] == 1_735_689_600_001_050_000  # both on the epoch
    assert result.diagnostics.counts["framework_duplicate"] == 2


def test_a_run_folder_records_its_files_and_neff_ntff_pairs(tmp_path: Path) -> None:
    neurontrace.convert(RUN, tmp_path / "ds")
    meta = neurontrace.file_metadata(tmp_path / "ds" / "rank=0" / "i-0abc_pid_101.parquet")
    run = meta["trace"]["neuron_run"]
    assert run["framework"].endswith("trace.json")
    assert run["system_trace"].endswith("ntrace.pb")
    assert [Path(p).name for p in run["ntff_neff"][0]] == ["123_vnc_0.ntff",
                                                           "neff_123_vnc_0.neff"]
    assert meta["source"][0]["format"] == "neuron-run"


def test_ntff_pairs_with_the_neff_sharing_its_numeric_id(tmp_path: Path) -> None:
    for name in ("neff_111_vnc_0.neff", "neff_222_vnc_0.neff", "222_vnc_0.ntff",
                 "profile_111_instid_3_vnc_0.ntff"):
        (tmp_path / name).write_bytes(b"")
    assert pair_neff(tmp_path / "222_vnc_0.ntff") == tmp_path / "neff_222_vnc_0.neff"
    assert pair_neff(tmp_path / "profile_111_instid_3_vnc_0.ntff") == \
        tmp_path / "neff_111_vnc_0.neff"


# -- raw captures ------------------------------------------------------------------------

STAND_IN = '''\
#!{python}
"""Stand-in for neuron-explorer: checks its arguments, writes a small Explorer folder,
then, like the real one, serves forever unless given --ingest-only."""
import sys, time
from pathlib import Path
import pyarrow as pa, pyarrow.parquet as pq

args = sys.argv[1:]
with open({log!r}, "a") as f:
    f.write(" ".join(args) + "\\n")
assert args[0] == "view", args
assert args[args.index("--output-format") + 1] == "parquet", args
data = Path(args[args.index("--data-path") + 1])
if "-n" in args:
    assert args[args.index("-n") + 1].endswith(".neff"), args
    assert args[args.index("-s") + 1].endswith(".ntff"), args
else:
    assert Path(args[args.index("-d") + 1]).is_dir(), args
name = args[args.index("--display-name") + 1]
out = data / "profiles" / "global" / f"{{name}}@latest"
out.mkdir(parents=True)
t0 = 1_735_689_600_000_000_000
pq.write_table(pa.table({{
    "name": ["nrt_execute", "nc_exec_running"], "start_ts": [t0 + 100, t0 + 150],
    "duration_ns": [200, 100], "trace_event_source": ["neuron_rt", "neuron_hw"],
    "process_id": [7, None], "thread_id": [8, None], "nc_idx": [0, 0],
}}), out / "SystemProfileEvents.parquet")
pq.write_table(pa.table({{"start_ts": [5], "end_ts": [25], "engine": ["Tensor"],
                          "opcode": ["MATMUL"]}}), out / "Instruction.parquet")
pq.write_table(pa.table({{"profile_schema_version": ["12.1.0"]}}), out / "Metadata.parquet")
while "--ingest-only" not in args:
    time.sleep(1)  # the UI/API server
'''


@pytest.fixture
def tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in ``neuron-explorer`` first on PATH; returns the log of its calls."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    exe = bin_dir / "neuron-explorer"
    exe.write_text(STAND_IN.format(python=sys.executable, log=str(log)))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log


def _capture(tmp_path: Path) -> Path:
    folder = tmp_path / "capture"
    folder.mkdir()
    (folder / "neff_123_vnc_0.neff").write_bytes(b"SYNTHETIC")
    (folder / "123_vnc_0.ntff").write_bytes(b"SYNTHETIC")
    return folder / "123_vnc_0.ntff"


def test_a_raw_ntff_is_converted_by_neuron_explorer_into_a_cache(
        tmp_path: Path, tool: Path) -> None:
    ntff = _capture(tmp_path)
    out = tmp_path / "out" / "capture.parquet"
    result = CliRunner().invoke(cli, ["convert", str(ntff), str(out)])
    assert result.exit_code == 0, result.output
    df = pl.read_parquet(out)
    assert sorted(df[S.NAME]) == ["MATMUL", "nc_exec_running", "nrt_execute"]
    matmul = df.filter(pl.col(S.NAME) == "MATMUL").row(0, named=True)
    assert matmul[S.START_NS] == 1_735_689_600_000_000_150  # placed by the first execution
    # the stand-in does not know --show-profile-schema (an older tool): asked, it fails
    calls = tool.read_text().splitlines()
    assert calls[:2] == ["--show-profile-schema", "view --show-profile-schema"]
    call = calls[2].split()
    assert call[:5] == ["view", "-n", str(ntff.parent / "neff_123_vnc_0.neff"), "-s",
                        str(ntff)]
    assert call[5:8] == ["--output-format", "parquet", "--data-path"]
    assert call[9:] == ["--ingest-only", "--display-name", "neurontrace"]
    cache = out.parent / ".neurontrace-cache"
    assert cache.is_dir() and str(cache) in call[8]
    CliRunner().invoke(cli, ["convert", str(ntff), str(out)])
    assert len(tool.read_text().splitlines()) == 3  # the second run reads the cache
    assert "tool_profile_schema" not in neurontrace.file_metadata(out)["trace"]["neuron"]


def test_a_run_folder_with_only_raw_files_converts_its_session_folder(
        tmp_path: Path, tool: Path) -> None:
    rank = tmp_path / "run" / "i-1_pid_9" / "20250101T000000"
    rank.mkdir(parents=True)
    for name in ("ntrace.pb", "trace_info.pb", "neff_5_vnc_0.neff", "5_vnc_0.ntff"):
        (rank / name).write_bytes(b"SYNTHETIC")
    out = tmp_path / "ds"
    neurontrace.convert(tmp_path / "run", out)
    views = [c for c in tool.read_text().splitlines() if "--data-path" in c]
    assert views[0].split()[:3] == ["view", "-d", str(rank)]
    df = neurontrace.scan(out).collect()
    assert df.height == 3 and df[S.PID].drop_nulls().unique().to_list() == [7, 9]


def test_without_neuron_explorer_a_raw_capture_fails_with_the_command_to_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ntff = _capture(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    out = tmp_path / "o.parquet"
    result = CliRunner().invoke(cli, ["convert", str(ntff), str(out)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert (f"neuron-explorer view -n {ntff.parent / 'neff_123_vnc_0.neff'} -s {ntff} "
            "--output-format parquet --data-path DIR --ingest-only") in lines[0]
    assert not out.exists()


def test_a_failing_converter_is_bad_input_with_its_last_message(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ntff = _capture(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "neuron-explorer"
    exe.write_text("#!/bin/sh\necho 'ERROR: NTFF version 99 not supported' >&2\nexit 3\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    result = CliRunner().invoke(cli, ["convert", str(ntff), str(tmp_path / "o.parquet")])
    assert result.exit_code == 2
    assert "neuron-explorer view failed (exit 3): ERROR: NTFF version 99" in result.output
    assert not any((tmp_path / ".neurontrace-cache").iterdir())  # nothing half-written


def test_converted_outputs_are_never_written_into_the_inputs(tmp_path: Path) -> None:
    before = sorted((p.relative_to(RUN).as_posix(), p.stat().st_mtime_ns)
                    for p in RUN.rglob("*"))
    neurontrace.convert(RUN, tmp_path / "ds")
    after = sorted((p.relative_to(RUN).as_posix(), p.stat().st_mtime_ns)
                   for p in RUN.rglob("*"))
    assert before == after


def test_a_run_folder_reads_a_view_d_session_once_with_its_device_folders(
        tmp_path: Path) -> None:
    cap = tmp_path / "run" / "i-0abc_pid_4242" / "20250101T000000"
    shutil.copytree(FIX / "view_d_session" / "profiles", cap / "profiles")
    out = tmp_path / "ds"
    result = neurontrace.convert(tmp_path / "run", out)
    df = neurontrace.scan(out).collect()
    instr = df.filter(pl.col(S.CATEGORY) == "Instruction")
    assert sorted(instr[S.DEVICE_COL].to_list()) == [0, 1]  # each device folder once
    assert df.filter(pl.col(S.NAME) == "nc_exec_running").height == 2
    assert len(result.outputs) == 1


def test_a_run_folder_whose_device_profile_list_is_unreadable_is_refused_naming_it(
        tmp_path: Path) -> None:
    cap = tmp_path / "run" / "i-0abc_pid_4242" / "20250101T000000"
    shutil.copytree(FIX / "view_d_session" / "profiles", cap / "profiles")
    bad = cap / "profiles" / "global" / "session@latest" / "DeviceProfileList.parquet"
    bad.write_bytes(b"not a Parquet file")
    out = tmp_path / "ds"
    result = CliRunner().invoke(cli, ["convert", str(tmp_path / "run"), str(out)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and f"{bad}: not a readable Parquet file" in lines[0]
    assert not out.exists()
