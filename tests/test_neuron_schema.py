"""Every Explorer Parquet fixture against the documented schema (7.4.0, Neuron SDK 2.31:
aws-neuron/aws-neuron-sdk tools/neuron-explorer/profile-schema-reference.rst, copied in
fixtures/neuron/neuron-explorer-schema.json): column names, Arrow types, required columns
and enum values; departures only where make_fixtures.DEVIATIONS declares them."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import neurontrace
from neurontrace import schema as S
from neurontrace.diagnostics import Diagnostics

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "neuron"
DOC: dict[str, Any] = json.loads((FIX / "neuron-explorer-schema.json").read_text())
TABLES = sorted(FIX.rglob("*.parquet"))


def _make() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_fixtures", FIX / "make_fixtures.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


MAKE = _make()


def departures(path: Path) -> dict[str, list[str]]:
    """How ``path``'s table departs from the documented schema: ``extra`` columns,
    ``missing`` required columns, ``retyped`` columns (each sorted)."""
    table = MAKE.table_name(path.name)
    fields = {f["name"]: f for f in DOC["tables"][table]["fields"]}
    schema = pq.read_schema(path)
    return {
        "extra": sorted(n for n in schema.names if n not in fields),
        "missing": sorted(n for n, f in fields.items()
                          if f["required"] and n not in schema.names),
        "retyped": sorted(n for n in schema.names if n in fields
                          and schema.field(n).type != MAKE.arrow_type(fields[n]["type"])),
    }


def declared(path: Path) -> dict[str, list[str]]:
    none: dict[str, list[str]] = {"extra": [], "missing": [], "retyped": []}
    got = MAKE.DEVIATIONS.get(path.parent.name, {}).get(path.stem, none)
    return {k: sorted(v) for k, v in got.items()}


def test_the_fixture_folder_holds_explorer_tables() -> None:
    assert len(TABLES) >= 20
    assert {p.parent.name for p in TABLES} >= {
        "explorer_rmsnorm_vnc_0", "explorer_required_only", "explorer_empty",
        "explorer_extra_missing_columns", "neff_456_vnc_1@latest"}


@pytest.mark.parametrize("path", TABLES, ids=lambda p: str(p.relative_to(FIX)))
def test_every_explorer_fixture_table_matches_the_documented_schema(path: Path) -> None:
    assert MAKE.table_name(path.name) in DOC["tables"], "not a documented table"
    assert departures(path) == declared(path)


@pytest.mark.parametrize("path", TABLES, ids=lambda p: str(p.relative_to(FIX)))
def test_enum_columns_hold_only_documented_values(path: Path) -> None:
    fields = DOC["tables"][MAKE.table_name(path.name)]["fields"]
    data = pq.read_table(path)
    for f in fields:
        if f["enum"] and f["name"] in data.column_names:
            values = {v for v in data.column(f["name"]).to_pylist() if v is not None}
            assert values <= set(DOC["enums"][f["enum"]]), f["name"]


def test_summary_percentages_are_fractions() -> None:
    for path in FIX.rglob("Summary.parquet"):
        row = pq.read_table(path).to_pylist()[0]
        pct = {k: v for k, v in row.items() if k.endswith("_percent") and v is not None}
        assert pct and all(0 <= v <= 1 for v in pct.values())


def test_the_full_fixture_holds_every_documented_field_of_its_tables() -> None:
    for path in (FIX / "explorer_rmsnorm_vnc_0").glob("*.parquet"):
        documented = [f["name"] for f in DOC["tables"][MAKE.table_name(path.name)]["fields"]]
        names = pq.read_schema(path).names
        assert names[:len(documented)] == documented, path.name


def test_the_required_only_fixture_holds_exactly_the_required_fields() -> None:
    paths = sorted((FIX / "explorer_required_only").glob("*.parquet"))
    assert {p.stem for p in paths} == {"SystemProfileEvents", "Instruction", "DmaPacket",
                                       "ActiveTime", "ExecutionInfo", "Metadata"}
    for path in paths:
        required = [f["name"] for f in DOC["tables"][path.stem]["fields"] if f["required"]]
        assert pq.read_schema(path).names == required, path.name


def test_the_required_only_fixture_is_read_whole() -> None:
    diag = Diagnostics()
    table = neurontrace.load(FIX / "explorer_required_only", diag=diag)
    cats = sorted(set(table.column(S.CATEGORY).to_pylist()))
    assert cats == ["ActiveTime", "DmaPacket", "Instruction", "framework", "neuron_hw",
                    "neuron_rt"]
    assert table.num_rows == 6


def test_a_mistyped_column_is_caught(tmp_path: Path) -> None:
    """The old fixtures' mistake: framework_stream_id written as int64, not string."""
    table = pa.table({f.name: pa.array([], f.type)
                      for f in MAKE.documented_schema("SystemProfileEvents")})
    i = table.schema.get_field_index("framework_stream_id")
    table = table.set_column(i, "framework_stream_id", pa.array([], pa.int64()))
    pq.write_table(table.drop_columns(["id"]), tmp_path / "SystemProfileEvents.parquet")
    got = departures(tmp_path / "SystemProfileEvents.parquet")
    assert got == {"extra": [], "missing": ["id"], "retyped": ["framework_stream_id"]}


@pytest.mark.parametrize("name", ["explorer_rmsnorm_vnc_0", "explorer_required_only",
                                  "explorer_empty", "explorer_extra_missing_columns"])
def test_the_committed_fixture_is_what_make_fixtures_writes(tmp_path: Path, name: str) -> None:
    build = {"explorer_rmsnorm_vnc_0": MAKE.explorer_rmsnorm,
             "explorer_required_only": MAKE.explorer_required_only,
             "explorer_empty": MAKE.explorer_empty,
             "explorer_extra_missing_columns": MAKE.explorer_extra_missing}[name]
    build(tmp_path / name)
    made = sorted(p.name for p in (tmp_path / name).glob("*.parquet"))
    assert made == sorted(p.name for p in (FIX / name).glob("*.parquet"))
    for f in made:
        assert pq.read_table(tmp_path / name / f).equals(pq.read_table(FIX / name / f)), f


def test_an_undeclared_undocumented_column_is_refused_by_the_generator(
        tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="undocumented columns"):
        MAKE._parquet(tmp_path / "x", "ActiveTime", [{"start_ts": 1, "colour": "red"}])


ESSENTIAL = {"SystemProfileEvents": ["name", "start_ts"], "Instruction": ["start_ts"],
             "DmaPacket": ["start_ts"], "ActiveTime": ["start_ts"]}


def _rewrite(folder: Path, change: Any) -> None:
    for f in folder.glob("*.parquet"):
        pq.write_table(change(MAKE.table_name(f.name), pq.read_table(f)), f)


def test_every_column_but_name_and_start_ts_may_be_missing(tmp_path: Path) -> None:
    """A newer schema may rename or drop any other documented column: read, never crash."""
    shutil.copytree(FIX / "explorer_rmsnorm_vnc_0", tmp_path / "x")

    def strip(table: str, t: pa.Table) -> pa.Table:
        keep = ESSENTIAL.get(table, t.column_names[:1])
        return t.select(keep)
    _rewrite(tmp_path / "x", strip)
    before = neurontrace.load(FIX / "explorer_rmsnorm_vnc_0").num_rows
    assert neurontrace.load(tmp_path / "x", diag=Diagnostics()).num_rows == before


def test_renamed_columns_are_read_by_presence_and_kept_in_args(tmp_path: Path) -> None:
    shutil.copytree(FIX / "explorer_rmsnorm_vnc_0", tmp_path / "x")

    def rename(table: str, t: pa.Table) -> pa.Table:
        keep = ESSENTIAL.get(table, t.column_names)
        return t.rename_columns([c if c in keep else f"{c}_v12" for c in t.column_names])
    _rewrite(tmp_path / "x", rename)
    df = pl.from_arrow(neurontrace.load(tmp_path / "x", diag=Diagnostics()))
    assert isinstance(df, pl.DataFrame)
    instr = df.filter(pl.col(S.CATEGORY) == "Instruction")
    assert instr.height == 5
    assert json.loads(instr[S.ARGS][0])["opcode_v12"] == "MATMUL"


def test_an_unknown_major_version_is_warned_once_per_read(tmp_path: Path) -> None:
    shutil.copytree(FIX / "view_d_session", tmp_path / "s")
    for f in (tmp_path / "s").rglob("Metadata.parquet"):
        t = pq.read_table(f)
        i = t.schema.get_field_index("profile_schema_version")
        pq.write_table(t.set_column(i, "profile_schema_version",
                                    pa.array(["13.0.0"] * t.num_rows)), f)
    diag = Diagnostics()
    table = neurontrace.load(tmp_path / "s" / "profiles" / "global" / "session@latest",
                             diag=diag)
    assert diag.counts["explorer_schema_version"] == 1  # three folders, one major
    assert pc.count(table.column(S.CATEGORY)).as_py() == 7


def test_a_device_folder_of_an_unknown_major_version_is_warned(tmp_path: Path) -> None:
    shutil.copytree(FIX / "view_d_session", tmp_path / "s")
    glob = tmp_path / "s" / "profiles" / "global"
    f = glob / "neff_9_vnc_0@latest" / "Metadata.parquet"
    t = pq.read_table(f)
    i = t.schema.get_field_index("profile_schema_version")
    pq.write_table(t.set_column(i, "profile_schema_version", pa.array(["14.2.0"])), f)
    diag = Diagnostics()
    neurontrace.load(glob / "session@latest", diag=diag)
    assert diag.counts["explorer_schema_version"] == 1
    assert "14.2.0" in diag.examples["explorer_schema_version"][0]


def _sync_capture(folder: Path, metadata: dict[str, Any]) -> None:
    """A sync point (host 2 ms, raw device clock 9 s) and one instruction 10 us into the
    device profile; no ExecutionInfo, so the sync point places it."""
    t0 = MAKE.T0
    MAKE._parquet(folder, "SystemProfileEvents", [{
        "id": 1, "name": "timestamp_sync_point", "start_ts": t0 + 1_999_000,
        "end_ts": t0 + 1_999_000, "duration_ns": 0, "trace_event_source": "neuron_hw",
        "instance_id": "i-0abc", "nc_idx": 0, "extra_attributes_json": json.dumps(
            {"cpu_timestamp_ns": t0 + 2_000_000, "nc_timestamp_ns": 9_000_000_000})}])
    MAKE._parquet(folder, "Instruction", [MAKE._instr(10_000, 5_000, "Tensor", "MATMUL", 0)])
    MAKE._parquet(folder, "Metadata", [{"profile_schema_version": MAKE.SCHEMA_VERSION,
                                        "neuroncore_idx": 0, **metadata}])


def test_a_sync_point_places_device_rows_through_first_hw_timestamp(tmp_path: Path) -> None:
    """adjusted = sync_cpu + (event_dev - sync_dev), event_dev on the raw device clock:
    the profile starts at first_hw_timestamp / ticks_per_nanosec = 8.9999 s."""
    _sync_capture(tmp_path / "x", {"first_hw_timestamp": 2 * 8_999_900_000,
                                   "ticks_per_nanosec": 2})
    table = neurontrace.load(tmp_path / "x", diag=Diagnostics())
    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    instr = df.filter(pl.col(S.CATEGORY) == "Instruction")
    assert instr[S.START_NS].item() == MAKE.T0 + 2_000_000 + (8_999_910_000 - 9_000_000_000)
    clock = json.loads(table.schema.metadata[b"neurontrace.clock"])["device"]["nc 0"]
    assert clock["method"] == "timestamp_sync_point" and clock["bridge_ns"] == 8_999_900_000


def test_without_first_hw_timestamp_the_sync_bridge_is_said_to_be_assumed(
        tmp_path: Path) -> None:
    _sync_capture(tmp_path / "x", {})
    table = neurontrace.load(tmp_path / "x", diag=Diagnostics())
    clock = json.loads(table.schema.metadata[b"neurontrace.clock"])["device"]["nc 0"]
    assert clock["method"] == "timestamp_sync_point" and "bridge_ns" not in clock
    assert clock["bridge"].startswith("none")


#: The reference the project was given (shared/docs beside the checkout), of which
#: fixtures/neuron/ keeps a copy so that the tests run without it.
SHARED_SCHEMA = Path(__file__).resolve().parents[1].parent / "shared" / "docs" / \
    "neuron-explorer-schema.json"


@pytest.mark.skipif(not SHARED_SCHEMA.exists(), reason=f"{SHARED_SCHEMA} is not here")
def test_the_fixtures_copy_of_the_schema_is_the_reference_one() -> None:
    assert json.loads(SHARED_SCHEMA.read_text()) == DOC, \
        "fixtures/neuron/neuron-explorer-schema.json differs from shared/docs: copy it again " \
        "and rerun fixtures/neuron/make_fixtures.py"
