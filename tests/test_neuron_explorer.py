"""Neuron Explorer Parquet folders (fixtures/neuron/explorer_*: synthetic, see README)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import neurontrace
from neurontrace import schema as S
from neurontrace.cli.main import cli
from neurontrace.diagnostics import Diagnostics
from neurontrace.readers import detect
from neurontrace.readers.neuron.clock import durations_agree, pair_by_duration, place

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "neuron"
RMSNORM = FIX / "explorer_rmsnorm_vnc_0"
T0 = 1_735_689_600_000_000_000


def frame(path: Path, diag: Diagnostics | None = None) -> tuple[pl.DataFrame, dict]:
    table = neurontrace.load(path, diag=diag)
    meta = {k.decode().removeprefix("neurontrace."): json.loads(v)
            for k, v in table.schema.metadata.items() if k != S.META_SCHEMA_VERSION
            and k != S.META_PRODUCER}
    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    return df, meta


def test_a_folder_of_explorer_tables_is_detected_by_its_contents() -> None:
    assert detect(RMSNORM).name == "neuron-explorer"
    assert detect(FIX / "explorer_empty").name == "neuron-explorer"


def test_system_rows_take_their_layer_from_trace_event_source() -> None:
    df, _ = frame(RMSNORM)
    system = df.filter(pl.col(S.CATEGORY).is_in(["framework", "neuron_rt", "neuron_hw"]))
    layers = dict(system.group_by(S.CATEGORY).agg(pl.col(S.LAYER).unique()).iter_rows())
    assert layers == {"framework": [S.FRAMEWORK], "neuron_rt": [S.RUNTIME],
                      "neuron_hw": [S.DEVICE]}


def test_system_start_ns_is_start_ts_exactly() -> None:
    df, _ = frame(RMSNORM)
    src = pl.read_parquet(RMSNORM / "SystemProfileEvents.parquet")
    got = df.filter(pl.col(S.CATEGORY) == "neuron_rt").sort(S.START_NS)
    want = src.filter(pl.col("trace_event_source") == "neuron_rt").sort("start_ts")
    assert got[S.START_NS].to_list() == want["start_ts"].to_list()
    assert got[S.DUR_NS].to_list() == want["duration_ns"].to_list()


def test_split_instruction_tables_read_as_one() -> None:
    df, _ = frame(RMSNORM)
    assert df.filter(pl.col(S.CATEGORY) == "Instruction").height == 3 + 2


def test_engine_names_are_normalised_whatever_their_case() -> None:
    df, _ = frame(RMSNORM)
    matmul = df.filter(pl.col(S.NAME) == "MATMUL")
    assert sorted(matmul[S.TRACK]) == ["nc 0 / pcore 0 / tensor", "nc 0 / pcore 1 / tensor"]
    engines = df.filter(pl.col(S.CATEGORY).is_in(["Instruction", "ActiveTime"]))
    lanes = engines[S.TRACK].str.split(" / ").list.get(2).unique().sort().to_list()
    assert lanes == ["scalar", "tensor", "vector"]


def test_lnc2_duplicates_are_kept_and_marked_as_one_execution() -> None:
    df, _ = frame(RMSNORM)
    runs = df.filter(pl.col(S.NAME) == "nc_exec_running").sort(S.START_NS)
    assert runs.height == 4  # two executions x two physical cores
    assert runs[S.EXECUTION].to_list() == ["nc0:exec1", "nc0:exec1", "nc0:exec2", "nc0:exec2"]
    assert runs[S.TRACK].n_unique() == 2  # one lane per physical core


def test_device_rows_are_placed_on_host_time_by_execution_windows() -> None:
    df, meta = frame(RMSNORM)
    first = df.filter(pl.col(S.NAME) == "MATMUL").sort(S.START_NS).row(0, named=True)
    # device 20_000 in execution 0 (device 10_000 .. 160_000), which the host saw start at
    # T0 + 1_120_000: 1_120_000 + (20_000 - 10_000).
    assert first[S.START_NS] == T0 + 1_130_000
    assert first[S.EXECUTION] == "nc0:exec1"
    dma = df.filter(pl.col(S.CATEGORY) == "DmaPacket").row(0, named=True)
    assert dma[S.START_NS] == T0 + 1_600_000 + (505_000 - 500_000)
    assert dma[S.BYTES] == 4
    placed = meta["clock"]["device"]["nc 0"]
    assert placed["method"] == "execution_windows"
    assert placed["uncertainty_ns"] == 500  # execution 2: 100_500 on device, 100_000 on host


def test_side_tables_are_kept_whole_in_the_metadata() -> None:
    _, meta = frame(RMSNORM)
    neuron = meta["trace"]["neuron"]
    tables = neuron["tables"]
    assert set(tables) == {"Metadata", "SchemaFields", "Summary", "ExecutionInfo",
                           "SystemProfileMetadata"}
    assert tables["Summary"][0]["total_time"] == pytest.approx(0.00025, rel=1e-6)  # float32
    assert [r["execution_index"] for r in tables["ExecutionInfo"]] == [0, 1]
    assert neuron["profile_schema_version"] == "7.4.0"


def test_extra_columns_go_to_args_and_missing_ones_are_null() -> None:
    df, _ = frame(FIX / "explorer_extra_missing_columns")
    rt = df.filter(pl.col(S.NAME) == "nrt_execute").row(0, named=True)
    assert json.loads(rt[S.ARGS])["span_color"] == "blue"
    assert rt[S.INSTANCE_ID] is None and rt[S.FLOW_IDS] is None
    instr = df.filter(pl.col(S.CATEGORY) == "Instruction").row(0, named=True)
    assert json.loads(instr[S.ARGS])["future_field"] == "x"
    assert instr[S.DUR_NS] == 50  # from end_ts - start_ts: no duration_ns column
    later = df.filter(pl.col(S.CATEGORY) == "Instruction")
    assert later.height == 1


def test_split_tables_with_an_extra_column_in_one_part_keep_it_in_args() -> None:
    df, _ = frame(RMSNORM)
    act = df.filter(pl.col(S.NAME) == "ACTIVATION").row(0, named=True)
    assert json.loads(act[S.ARGS])["future_metric"] == 2.5


def test_string_process_ids_become_numbers_and_text_stays_a_label() -> None:
    df, _ = frame(FIX / "explorer_extra_missing_columns")
    rt = df.filter(pl.col(S.NAME) == "nrt_execute").row(0, named=True)
    assert rt[S.PID] == 4242 and rt[S.TID] is None
    assert rt[S.TRACK] == "4242 / main"


def test_an_unknown_major_schema_version_is_a_warning_naming_it() -> None:
    diag = Diagnostics()
    df, _ = frame(FIX / "explorer_extra_missing_columns", diag)
    assert df.height == 3
    assert diag.counts["explorer_schema_version"] == 1
    assert "13.0.0" in diag.examples["explorer_schema_version"][0]


def test_without_execution_info_device_rows_start_with_the_first_execution() -> None:
    df, meta = frame(FIX / "explorer_extra_missing_columns")
    instr = df.filter(pl.col(S.CATEGORY) == "Instruction").row(0, named=True)
    assert instr[S.START_NS] == T0 + 1_100
    assert meta["clock"]["device"]["nc ?"]["method"] == "first_execution"


def test_an_empty_capture_is_an_empty_table() -> None:
    diag = Diagnostics()
    df, meta = frame(FIX / "explorer_empty", diag)
    assert df.height == 0 and df.columns == list(S.NAMES)
    assert meta["trace"]["neuron"]["profile_schema_version"] == "7.4.0"
    assert not diag


def test_explorer_folder_converts_to_one_file(tmp_path: Path) -> None:
    out = tmp_path / "rms.parquet"
    result = CliRunner().invoke(cli, ["convert", str(RMSNORM), str(out)])
    assert result.exit_code == 0, result.output
    assert out.is_file() and neurontrace.read(out).num_rows == 20


def test_a_system_table_without_start_ts_is_bad_input_naming_file_and_field(
        tmp_path: Path) -> None:
    folder = tmp_path / "broken"
    folder.mkdir()
    pq.write_table(pa.table({"name": ["nrt_execute"], "duration_ns": [5]}),
                   folder / "SystemProfileEvents.parquet")
    result = CliRunner().invoke(cli, ["convert", str(folder), str(tmp_path / "o.parquet")])
    assert result.exit_code == 2
    assert "SystemProfileEvents" in result.output and "start_ts" in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("source", ["somewhere_else", None])
def test_unknown_event_sources_are_runtime_rows_with_a_warning(
        tmp_path: Path, source: str | None) -> None:
    folder = tmp_path / "odd"
    folder.mkdir()
    pq.write_table(pa.table({"name": ["mystery"], "start_ts": [T0], "duration_ns": [1],
                             "trace_event_source": pa.array([source], pa.string())}),
                   folder / "SystemProfileEvents.parquet")
    diag = Diagnostics()
    df, _ = frame(folder, diag)
    assert df[S.LAYER].to_list() == [S.RUNTIME]
    assert bool(diag.counts["unknown_event_source"]) == (source is not None)


SESSION = FIX / "view_d_session" / "profiles" / "global"


def test_a_view_d_session_reads_every_device_folder_its_device_profile_list_names() -> None:
    diag = Diagnostics()
    df, meta = frame(SESSION / "session@latest", diag)
    instr = df.filter(pl.col(S.CATEGORY) == "Instruction").sort(S.DEVICE_COL)
    assert instr.select(S.DEVICE_COL, S.INSTANCE_ID, S.PID).rows() == [
        (0, "i-0abc", 4242), (1, "i-0abc", 4242)]
    # Each placed by its own core's nc_exec_running: device 10 us, execution from 5 us.
    assert instr[S.START_NS].to_list() == [T0 + 1_100_000 + 5_000, T0 + 1_200_000 + 5_000]
    bound = meta["trace"]["neuron"]["device_profiles"]
    assert [(b["device_profile_name"], b["nc_id"], b["model_id"]) for b in bound] == [
        ("neff_7_vnc_0", 0, 7), ("neff_9_vnc_0", 1, 9)]
    assert set(meta["clock"]["device"]) == {"i-0abc pid 4242 nc 0", "i-0abc pid 4242 nc 1"}
    assert diag.counts == {}


def test_the_neuroncore_comes_from_device_profile_list_not_the_folder_name() -> None:
    df, _ = frame(SESSION / "session@latest")
    nc1 = df.filter((pl.col(S.CATEGORY) == "Instruction") & (pl.col(S.DEVICE_COL) == 1))
    assert nc1.height == 1 and nc1[S.TRACK].item().startswith("nc 1 /")  # named _vnc_0


def test_a_device_folder_alone_takes_its_core_from_metadata_neuroncore_idx() -> None:
    diag = Diagnostics()
    df, _ = frame(SESSION / "neff_7_vnc_0@latest", diag)
    assert df[S.DEVICE_COL].to_list() == [0]
    assert "neuroncore_from_folder_name" not in diag.counts


def test_a_device_folder_without_a_recorded_core_falls_back_on_its_name_warned() -> None:
    diag = Diagnostics()
    df, _ = frame(SESSION / "neff_9_vnc_0@latest", diag)
    assert df[S.DEVICE_COL].to_list() == [0]
    assert diag.counts["neuroncore_from_folder_name"] == 1


def test_a_device_profile_without_its_folder_is_warned_and_skipped(tmp_path: Path) -> None:
    shutil.copytree(SESSION / "session@latest", tmp_path / "session@latest")
    diag = Diagnostics()
    df, _ = frame(tmp_path / "session@latest", diag)
    assert df.filter(pl.col(S.CATEGORY) == "Instruction").height == 0
    assert diag.counts["device_profile_missing"] == 2


def test_system_pcore_is_the_device_core_and_device_table_pcore_is_within_the_nc() -> None:
    """LNC=2: SystemProfileEvents.pcore_idx counts physical cores within the device; the
    device tables' pcore_idx is 0 or 1 within the logical core. Their tracks say which."""
    df, _ = frame(SESSION / "session@latest")
    hw = df.filter((pl.col(S.NAME) == "nc_exec_running") & (pl.col(S.DEVICE_COL) == 1))
    assert hw[S.TRACK].to_list() == ["nc 1 / device core 2 / nc_exec_running"]
    assert json.loads(hw[S.ARGS].item())["pcore_idx"] == 2
    instr = df.filter((pl.col(S.CATEGORY) == "Instruction") & (pl.col(S.DEVICE_COL) == 1))
    assert instr[S.TRACK].to_list() == ["nc 1 / pcore 0 / tensor"]
    df, _ = frame(RMSNORM)
    lnc2 = df.filter(pl.col(S.NAME) == "nc_exec_running")[S.TRACK].unique().sort().to_list()
    assert lnc2 == ["nc 0 / device core 0 / nc_exec_running",
                    "nc 0 / device core 1 / nc_exec_running"]


TWO_NEFF = FIX / "explorer_two_neff_flows"


def test_two_neffs_reusing_a_flow_id_are_two_executions() -> None:
    df, _ = frame(TWO_NEFF)
    runs = df.filter(pl.col(S.NAME) == "nc_exec_running").sort(S.START_NS)
    assert runs[S.EXECUTION].to_list() == ["nc0:model7:execf1", "nc0:model7:execf1",
                                           "nc0:model9:execf1", "nc0:model7:execf2"]


def test_a_device_execution_pairs_with_the_host_one_of_its_duration_not_the_first() -> None:
    df, meta = frame(TWO_NEFF)
    instr = df.filter(pl.col(S.CATEGORY) == "Instruction").row(0, named=True)
    # ExecutionInfo 5..158 us (153 us) is the third host execution (150 us), not the first.
    assert instr[S.START_NS] == T0 + 1_400_000 + (10_000 - 5_000)
    assert instr[S.EXECUTION] == "nc0:model7:execf2"
    placed = meta["clock"]["device"]["nc 0"]
    assert (placed["pairing"], placed["largest_mismatch_ns"]) == ("duration", 3_000)


def test_durations_agree_within_ten_microseconds_or_two_per_mille() -> None:
    assert durations_agree(100_000, 110_000) and not durations_agree(100_000, 110_001)
    # 0.2% of the longer: 20_040 ns of 10_020_040 ns.
    assert durations_agree(10_000_000, 10_020_040)
    assert not durations_agree(10_000_000, 10_020_041)
    # Equal durations: order decides; a device execution with no match stays unpaired.
    assert pair_by_duration([50, 50, 999_999], [50, 50, 50]) == [(0, 0), (1, 1)]


def test_executions_pair_in_order_when_no_duration_agrees() -> None:
    d = pl.DataFrame({"d_start": [0, 500_000], "d_end": [100_000, 600_000]})
    h = pl.DataFrame({"start": [10_000_000, 20_000_000], "end": [10_400_000, 20_400_000],
                      "execution": ["nc0:exec1", "nc0:exec2"]})
    p = place(0, d, h, None)
    assert p.describe()["pairing"] == "order" and p.describe()["largest_mismatch_ns"] == 300_000


def test_a_bound_device_profile_pairs_only_with_its_model_s_executions() -> None:
    df, meta = frame(SESSION / "session@latest")
    # nc 1's profile is model 9's: its one execution is placed on model 9's window.
    nc1 = df.filter((pl.col(S.CATEGORY) == "Instruction") & (pl.col(S.DEVICE_COL) == 1))
    assert nc1[S.EXECUTION].to_list() == ["nc1:model9:execf1"]
    assert meta["clock"]["device"]["i-0abc pid 4242 nc 1"]["pairing"] == "duration"


def test_model_id_comes_from_extra_attributes_and_from_the_bound_device_profile() -> None:
    df, _ = frame(TWO_NEFF)
    rows = df.sort(S.START_NS).filter(pl.col(S.LAYER) != S.FRAMEWORK)
    assert rows.select(S.NAME, S.MODEL_ID).rows()[:5] == [
        ("nrt_execute", 7), ("nc_exec_running", 7), ("nc_exec_running", 7),
        ("nrt_execute", 9), ("nc_exec_running", 9)]
    assert df.filter(pl.col(S.LAYER) == S.FRAMEWORK)[S.MODEL_ID].null_count() == 3
    df, _ = frame(SESSION / "session@latest")
    instr = df.filter(pl.col(S.CATEGORY) == "Instruction").sort(S.DEVICE_COL)
    # DeviceProfileList binds neff_7_vnc_0 to model 7, neff_9_vnc_0 to model 9
    assert instr.select(S.DEVICE_COL, S.MODEL_ID).rows() == [(0, 7), (1, 9)]


def test_the_logical_and_physical_cores_are_columns_each_of_one_meaning() -> None:
    """``device`` is the logical NeuronCore; ``device_core`` the physical core within the
    device (SystemProfileEvents.pcore_idx); ``pcore`` the core within the logical one
    (the device tables' pcore_idx). A row has at most one of the two."""
    df, _ = frame(SESSION / "session@latest")
    hw = df.filter(pl.col(S.NAME) == "nc_exec_running").sort(S.DEVICE_COL)
    assert hw.select(S.DEVICE_COL, S.DEVICE_CORE, S.PCORE).rows() == [(0, 0, None),
                                                                      (1, 2, None)]
    instr = df.filter(pl.col(S.CATEGORY) == "Instruction").sort(S.DEVICE_COL)
    assert instr.select(S.DEVICE_COL, S.DEVICE_CORE, S.PCORE).rows() == [(0, None, 0),
                                                                         (1, None, 0)]
    df, _ = frame(RMSNORM)
    lnc2 = df.filter(pl.col(S.NAME) == "nc_exec_running")
    assert sorted(set(lnc2.select(S.DEVICE_COL, S.DEVICE_CORE).rows())) == [(0, 0), (0, 1)]
    matmul = df.filter(pl.col(S.NAME) == "MATMUL").sort(S.PCORE)
    assert matmul.select(S.DEVICE_COL, S.PCORE, S.TRACK).rows() == [
        (0, 0, "nc 0 / pcore 0 / tensor"), (0, 1, "nc 0 / pcore 1 / tensor")]
    both = df.filter(pl.col(S.DEVICE_CORE).is_not_null() & pl.col(S.PCORE).is_not_null())
    assert both.height == 0


def test_a_legacy_device_core_idx_is_the_device_core_column() -> None:
    df, _ = frame(FIX / "system_profile_string_ids.json")
    hw = df.filter(pl.col(S.NAME) == "nc_exec_running").sort(S.START_NS)
    assert hw.select(S.DEVICE_COL, S.DEVICE_CORE, S.PCORE).rows() == [(0, 0, None),
                                                                      (0, 1, None)]


def test_a_file_written_before_the_neuron_columns_is_refused_convert_it_again(
        tmp_path: Path) -> None:
    """Schema 3 added model_id, device_core and pcore: a schema-2 file (without them)
    is refused in one line, and a rerun of convert writes it again."""
    out = tmp_path / "old.parquet"
    neurontrace.convert(RMSNORM, out)
    table = pq.read_table(out)
    meta = dict(table.schema.metadata)
    meta[S.META_SCHEMA_VERSION] = b"2"
    old = table.drop_columns([S.MODEL_ID, S.DEVICE_CORE, S.PCORE]).replace_schema_metadata(meta)
    pq.write_table(old, out)
    result = CliRunner().invoke(cli, ["ops", str(out)])
    assert result.exit_code == 2
    assert "schema version 2; convert it again" in result.output
    neurontrace.convert(RMSNORM, out)
    assert neurontrace.file_metadata(out)["schema_version"] == int(S.SCHEMA_VERSION)
