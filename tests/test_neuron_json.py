"""Neuron legacy JSON, device-profile JSON, summary-json and live fetch (synthetic)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import neurontrace
from neurontrace import schema as S
from neurontrace.cli.main import cli
from neurontrace.diagnostics import Diagnostics
from neurontrace.readers import detect

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "neuron"
T0 = 1_735_689_600_000_000_000


def frame(path: Path, diag: Diagnostics | None = None) -> tuple[pl.DataFrame, dict]:
    table = neurontrace.load(path, diag=diag)
    meta = {k.decode().removeprefix("neurontrace."): json.loads(v)
            for k, v in table.schema.metadata.items()
            if k not in (S.META_SCHEMA_VERSION, S.META_PRODUCER)}
    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    return df, meta


@pytest.mark.parametrize(("name", "reader"), [
    ("system_profile_string_ids.json", "neuron-system-json"),
    ("system_profile_empty.json", "neuron-system-json"),
    ("device_profile_ns.json", "neuron-device-json"),
    ("device_profile_ps.json", "neuron-device-json"),
    ("summary_keyed.json", "neuron-summary-json"),
    ("summary_flat.json", "neuron-summary-json"),
    ("summary_list.json", "neuron-summary-json"),
    ("live_fetch_unpaired.json", "neuron-live-json"),
])
def test_each_shape_is_detected_by_content(name: str, reader: str, tmp_path: Path) -> None:
    anonymous = tmp_path / "x.json"  # no help from the file name
    anonymous.write_bytes((FIX / name).read_bytes())
    assert detect(anonymous).name == reader


def test_system_profile_coerces_string_ids() -> None:
    df, _ = frame(FIX / "system_profile_string_ids.json")
    assert df[S.PID].to_list() == [4242] * 5
    write = df.filter(pl.col(S.NAME) == "nrt_tensor_write").row(0, named=True)
    assert write[S.BYTES] == 4 and write[S.DEVICE_COL] == 0
    assert json.loads(write[S.ARGS])["tensor_name"] == "eps"


def test_system_profile_layers_follow_type_and_event_name() -> None:
    df, _ = frame(FIX / "system_profile_string_ids.json")
    assert dict(df.select(S.NAME, S.LAYER).unique().iter_rows()) == {
        "aten::mul": S.FRAMEWORK, "nrt_execute": S.RUNTIME,
        "nrt_tensor_write": S.RUNTIME, "nc_exec_running": S.DEVICE,
    }


def test_system_profile_lnc2_rows_share_one_execution_whereever_exec_id_sits() -> None:
    df, _ = frame(FIX / "system_profile_string_ids.json")
    runs = df.filter(pl.col(S.NAME) == "nc_exec_running")
    assert runs[S.EXECUTION].to_list() == ["nc0:exec7", "nc0:exec7"]
    assert runs[S.TRACK].n_unique() == 2


def test_an_empty_system_profile_is_an_empty_table() -> None:
    df, _ = frame(FIX / "system_profile_empty.json")
    assert df.height == 0


def test_device_profile_in_picoseconds_reads_as_the_same_nanoseconds() -> None:
    ns, meta_ns = frame(FIX / "device_profile_ns.json")
    ps, meta_ps = frame(FIX / "device_profile_ps.json")
    cols = [S.NAME, S.START_NS, S.DUR_NS, S.TRACK]
    assert ns.select(cols).equals(ps.select(cols))
    assert ns.filter(pl.col(S.NAME) == "TENSOR_TENSOR")[S.DUR_NS].item() == 50_000
    assert (meta_ns["clock"]["time_unit"], meta_ps["clock"]["time_unit"]) == ("ns", "ps")
    assert meta_ps["clock"]["calibration"]["ratio"] == 1000.0


def test_device_profile_with_an_unexplained_span_is_read_as_ns_with_a_warning(
        tmp_path: Path) -> None:
    doc = json.loads((FIX / "device_profile_ns.json").read_text())
    doc["summary"][0]["total_time"] = 1.0  # 10^4 times the instructions' span
    f = tmp_path / "device.json"
    f.write_text(json.dumps(doc))
    diag = Diagnostics()
    _, meta = frame(f, diag)
    assert meta["clock"]["time_unit"] == "ns" and meta["clock"]["calibration"]["assumed"]
    assert diag.counts["device_time_unit"] == 1


def test_device_profile_dma_carries_its_bytes() -> None:
    df, _ = frame(FIX / "device_profile_ns.json")
    dma = df.filter(pl.col(S.CATEGORY) == "dma").row(0, named=True)
    assert (dma[S.BYTES], dma[S.TRACK]) == (4, "nc ? / dma / qInput0")


@pytest.mark.parametrize(("name", "shape", "rows"), [
    ("summary_keyed.json", "keyed", 2), ("summary_flat.json", "flat", 1),
    ("summary_list.json", "list", 1),
])
def test_summary_json_in_each_shape_is_kept_as_a_side_table(
        name: str, shape: str, rows: int) -> None:
    df, meta = frame(FIX / name)
    summary = meta["trace"]["neuron"]
    assert df.height == 0
    assert summary["shape"] == shape and len(summary["tables"]["Summary"]) == rows
    assert all("total_time" in r for r in summary["tables"]["Summary"])


def test_summary_json_of_another_shape_is_bad_input(tmp_path: Path) -> None:
    f = tmp_path / "summary.json"
    f.write_text('{"total_time_x": 1, "Summary": 3}')
    result = CliRunner().invoke(cli, ["convert", "--format", "neuron-summary-json", str(f),
                                      str(tmp_path / "o.parquet")])
    assert result.exit_code == 2 and "summary.json" in result.output


def test_live_fetch_pairs_start_and_stop_by_core_and_tracking_id() -> None:
    diag = Diagnostics()
    df, _ = frame(FIX / "live_fetch_unpaired.json", diag)
    spans = df.filter(pl.col(S.KIND) == S.SPAN).sort(S.DEVICE_COL)
    assert spans.select(S.DEVICE_COL, S.START_NS, S.DUR_NS).rows() == [
        (0, 1_000, 4_000), (1, 1_010, 4_010)]
    lone = df.filter(pl.col(S.KIND) == S.INSTANT).row(0, named=True)
    assert (lone[S.START_NS], lone[S.EXECUTION]) == (6_000, "nc0:exec2")
    assert diag.counts["unpaired_start"] == 1
