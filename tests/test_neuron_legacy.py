"""Tolerant legacy Neuron readers (issue 15, 6): layouts seen besides the documented one.

Fixtures (synthetic, fixtures/README.md): ``system_profile_framework_group.json`` (a
framework event without ``type``), ``device_profile_subgroup.json`` (engine in
``subgroup``, DMA queue in ``label``, size in ``transfer_size``, ``hlo_attrs`` as text,
no ``summary``, a unit on the rows), ``device_profile_no_clue.json`` (no summary and no
other clue). The ``neuron-explorer inspect`` layout and a ``neffs/`` folder are built
here from placeholder files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pytest
from test_neuron_raw import EXPLORER, _install
from test_neuron_raw import FIX as EXPLORER_FIX

import neurontrace
from neurontrace import schema as S
from neurontrace.diagnostics import Diagnostics
from neurontrace.readers import detect
from neurontrace.readers.neuron.raw import pair_neff
from neurontrace.readers.neuron.run import capture_folders, inspect

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "neuron"


def frame(path: Path, diag: Diagnostics | None = None) -> tuple[pl.DataFrame, dict]:
    table = neurontrace.load(path, diag=diag)
    meta = {k.decode().removeprefix("neurontrace."): json.loads(v)
            for k, v in table.schema.metadata.items()
            if k not in (S.META_SCHEMA_VERSION, S.META_PRODUCER)}
    df = pl.from_arrow(table)
    assert isinstance(df, pl.DataFrame)
    return df, meta


def test_a_framework_event_without_type_is_known_by_its_group() -> None:
    df, _ = frame(FIX / "system_profile_framework_group.json")
    rows = {r[S.NAME]: r for r in df.iter_rows(named=True)}
    assert rows["aten::add"][S.LAYER] == S.FRAMEWORK
    assert rows["aten::add"][S.ROLE] == S.OPERATOR
    assert rows["aten::add"][S.CATEGORY] == "framework_pytorch"
    assert rows["nrt_execute"][S.LAYER] == S.RUNTIME  # a group that is not framework
    assert rows["nrt_execute"][S.CATEGORY] == "11"  # type first, where there is one
    assert rows["nc_exec_running"][S.LAYER] == S.DEVICE


def test_device_json_takes_engine_from_subgroup_and_queue_from_label() -> None:
    df, _ = frame(FIX / "device_profile_subgroup.json")
    instr = df.filter(pl.col(S.CATEGORY) == "instruction")
    assert instr[S.TRACK].to_list() == ["nc 1 / tensor", "nc 1 / vector"]
    dma = df.filter(pl.col(S.CATEGORY) == "dma").row(0, named=True)
    assert dma[S.NAME] == "qInput0" and dma[S.TRACK] == "nc 1 / dma / qInput0"
    assert dma[S.BYTES] == 4 and dma[S.ROLE] == S.TRANSFER


def test_device_json_hlo_attrs_as_text_is_decoded_or_kept() -> None:
    df, _ = frame(FIX / "device_profile_subgroup.json")
    args = {r[S.NAME]: json.loads(r[S.ARGS]) for r in df.iter_rows(named=True)}
    assert args["MATMUL"]["hlo_attrs"] == {"lhs_contracting_dims": [1]}
    assert args["TENSOR_TENSOR"]["hlo_attrs"] == "kind=elementwise"
    assert args["MATMUL"]["subgroup"] == "Tensor"  # kept as it was, too


def test_device_json_without_summary_takes_the_unit_the_rows_declare() -> None:
    diag = Diagnostics()
    df, meta = frame(FIX / "device_profile_subgroup.json", diag)
    assert meta["clock"]["time_unit"] == "ns"
    assert meta["clock"]["calibration"] == {"unit_source": "instruction.timestamp_unit"}
    assert "device_time_unit" not in diag.counts
    assert df.filter(pl.col(S.NAME) == "TENSOR_TENSOR")[S.START_NS].item() == 50_000


def test_device_json_without_summary_declared_ps_is_divided(tmp_path: Path) -> None:
    doc = json.loads((FIX / "device_profile_subgroup.json").read_text())
    doc["metadata"]["timestamp_unit"] = "ps"
    path = tmp_path / "device_profile_model_1.json"
    path.write_text(json.dumps(doc))
    df, meta = frame(path)
    assert meta["clock"]["time_unit"] == "ps"
    assert meta["clock"]["calibration"] == {"unit_source": "metadata.timestamp_unit"}
    assert df.filter(pl.col(S.NAME) == "TENSOR_TENSOR")[S.START_NS].item() == 50


def test_device_json_without_summary_calibrates_on_metadata_total_time(
        tmp_path: Path) -> None:
    doc = json.loads((FIX / "device_profile_no_clue.json").read_text())
    doc["metadata"]["total_time"] = 0.0000001  # 100 ns for a 100,000 span: picoseconds
    path = tmp_path / "device_profile_model_2.json"
    path.write_text(json.dumps(doc))
    _, meta = frame(path)
    assert meta["clock"]["time_unit"] == "ps"
    assert meta["clock"]["calibration"]["unit_source"] == "metadata.total_time"


def test_device_json_with_no_clue_is_ns_as_documented_and_says_so() -> None:
    diag = Diagnostics()
    _, meta = frame(FIX / "device_profile_no_clue.json", diag)
    assert meta["clock"]["time_unit"] == "ns"
    assert meta["clock"]["calibration"]["unit_source"] == "assumed: documented ns"
    assert diag.counts["device_time_unit"] == 1


def test_a_summary_given_as_one_object_is_a_summary(tmp_path: Path) -> None:
    doc = json.loads((FIX / "device_profile_ns.json").read_text())
    doc["summary"] = doc["summary"][0]
    path = tmp_path / "x.json"
    path.write_text(json.dumps(doc))
    _, meta = frame(path)
    assert meta["clock"]["calibration"]["unit_source"] == "summary.total_time"
    assert meta["clock"]["calibration"]["ratio"] == 1.0


@pytest.mark.parametrize("name", ["system_profile_framework_group.json",
                                  "device_profile_subgroup.json",
                                  "device_profile_no_clue.json"])
def test_the_legacy_variants_are_detected_by_content(name: str, tmp_path: Path) -> None:
    anonymous = tmp_path / "x.json"
    anonymous.write_bytes((FIX / name).read_bytes())
    assert detect(anonymous).name == ("neuron-system-json" if "system" in name
                                      else "neuron-device-json")


@pytest.mark.parametrize("where", ["neffs", "../neffs"])
def test_an_ntff_pairs_with_its_neff_in_a_neffs_folder(tmp_path: Path, where: str) -> None:
    proc = tmp_path / "i-1_pid_9"
    proc.mkdir()
    neffs = (proc / where).resolve()
    neffs.mkdir()
    for name in ("neff_111.neff", "neff_222.neff"):
        (neffs / name).write_bytes(b"SYNTHETIC")
    (proc / "222_instid_0_vnc_0.ntff").write_bytes(b"SYNTHETIC")
    assert pair_neff(proc / "222_instid_0_vnc_0.ntff") == neffs / "neff_222.neff"


def test_the_flat_inspect_layout_is_one_capture_of_its_process(tmp_path: Path) -> None:
    run = tmp_path / "output"
    proc = run / "i-0abc_pid_210229"
    proc.mkdir(parents=True)
    for name in ("ntrace.pb", "trace_info.pb", "neff_3957.neff",
                 "3957_instid_0_vnc_0.ntff"):
        (proc / name).write_bytes(b"SYNTHETIC")
    assert capture_folders(run) == [proc]
    assert capture_folders(proc) == [proc]
    cap = inspect(proc)
    assert (cap.instance, cap.pid, cap.system_trace) == ("i-0abc", 210229, proc / "ntrace.pb")
    assert cap.pairs == [(proc / "3957_instid_0_vnc_0.ntff", proc / "neff_3957.neff")]


def test_a_flat_inspect_folder_converts_through_neuron_explorer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    run = tmp_path / "output"
    proc = run / "i-0abc_pid_210229"
    proc.mkdir(parents=True)
    for name in ("ntrace.pb", "trace_info.pb", "neff_3957.neff", "3957_instid_0_vnc_0.ntff"):
        (proc / name).write_bytes(b"SYNTHETIC")
    log, pids = tmp_path / "calls.log", tmp_path / "pids"
    _install(tmp_path / "bin", "neuron-explorer", EXPLORER.format(
        python=sys.executable, log=str(log), pids=str(pids), fixture=str(EXPLORER_FIX)))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    neurontrace.convert(run, tmp_path / "ds")
    views = [c for c in log.read_text().splitlines() if "--data-path" in c]
    assert views[0].split()[:3] == ["view", "-d", str(proc)]
    df = neurontrace.scan(tmp_path / "ds").collect()
    assert df.height > 0 and df[S.INSTANCE_ID].drop_nulls().unique().to_list() == ["i-0abc"]
