"""The Neuron path, against a stand-in ``torch_neuronx`` (tests/capture/standin, synthetic).

What is asserted is the configuration the Neuron documentation asks for (formats.md §2):
activities CPU + PrivateUse1, ``NeuronConfig`` with DEVICE and RUNTIME modes, output and
NEFF cache inside the run folder, ``NeuronProfiler.export_trace`` as ``on_trace_ready``,
``torch_neuronx.synchronize()`` inside the profiled block, compile-time variables set
before TorchNeuron is imported; and that the folder TorchNeuron writes is kept in its
layout, decoded by ``neuron-explorer`` when on PATH, and converted.
"""

from __future__ import annotations

import importlib
import os
import stat
import sys
from pathlib import Path

import pytest

from neurontrace.capture import neuron

from capturing import SHAPE, STEPS, capture, events, manifest, step_names

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.torch,
              pytest.mark.filterwarnings("ignore:The privateuseone is not a valid device")]

STANDIN = Path(__file__).parent / "standin"
VARIANTS = ("naive", "rms_norm", "compiled")
EXPLORER = """#!/bin/sh
# stand-in neuron-explorer: record the arguments, ingest into --data-path, then (like the
# real one) serve forever unless given --ingest-only
echo "$@" >> "$(dirname "$0")/calls.txt"
ingest_only=no
while [ $# -gt 0 ]; do
  if [ "$1" = "--data-path" ]; then mkdir -p "$2" && echo stand-in > "$2/Summary.parquet"; fi
  if [ "$1" = "--ingest-only" ]; then ingest_only=yes; fi
  shift
done
while [ "$ingest_only" = no ]; do sleep 1; done
"""


@pytest.fixture(scope="module")
def neuron_run(tmp_path_factory: pytest.TempPathFactory):
    mp = pytest.MonkeyPatch()
    tmp = tmp_path_factory.mktemp("neuron")
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    explorer = bin_dir / "neuron-explorer"
    explorer.write_text(EXPLORER)
    explorer.chmod(explorer.stat().st_mode | stat.S_IEXEC)
    mp.syspath_prepend(str(STANDIN))
    mp.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    for key in ("TORCH_NEURONX_NEFF_CACHE_DIR", "XLA_IR_DEBUG", "XLA_HLO_DEBUG"):
        mp.setenv(key, "unset by the test")
        mp.delenv(key)
    mp.setattr(torch, "neuron", None, raising=False)  # restored (removed) afterwards
    mp.setattr(neuron, "DEVICE_TYPE", "cpu")  # the stand-in runs tensors on the CPU
    for name in ("torch_neuronx", "torch_neuronx.profiling"):
        sys.modules.pop(name, None)
    out = tmp / "demo"
    try:
        result = capture("--out", str(out), "--shape", SHAPE, "--steps", str(STEPS),
                         "--warmup", "1")
        standin = importlib.import_module("torch_neuronx")
        profiling = importlib.import_module("torch_neuronx.profiling")
        yield out, result.stdout, standin, profiling, bin_dir / "calls.txt"
    finally:
        for name in ("torch_neuronx", "torch_neuronx.profiling"):
            sys.modules.pop(name, None)
        mp.undo()


def test_auto_picks_neuron_when_torch_neuronx_sees_a_device(neuron_run):
    out, *_ = neuron_run
    assert manifest(out)["device"]["kind"] == "neuron"
    assert manifest(out)["device"]["count"] == 2


def test_profiles_cpu_and_privateuse1_with_a_neuron_config_per_variant(neuron_run):
    _, _, _, profiling, _ = neuron_run
    assert len(profiling.EXPORTS) == len(VARIANTS)
    for export in profiling.EXPORTS:
        assert export["activities"] == ["CPU", "PrivateUse1"]
        assert export["record_shapes"] is True
        assert export["experimental_config"] is export["config"]
        assert export["config"].modes == [profiling.ProfileMode.DEVICE,
                                          profiling.ProfileMode.RUNTIME]


def test_output_and_neff_cache_are_inside_the_run_folder(neuron_run):
    out, _, standin, profiling, _ = neuron_run
    for variant, export in zip(VARIANTS, profiling.EXPORTS, strict=True):
        cfg = export["config"]
        # configured while the run was being staged, then renamed to --out
        run_dir = Path(cfg.profile_output_dir).parent
        assert Path(cfg.profile_output_dir).name == variant
        assert Path(cfg.neff_cache_dir) == run_dir / "neff_cache"
        assert run_dir.parent == out.parent.resolve()
    assert standin.ENV_AT_IMPORT["TORCH_NEURONX_NEFF_CACHE_DIR"] == str(
        Path(profiling.EXPORTS[0]["config"].neff_cache_dir))
    assert standin.ENV_AT_IMPORT["XLA_IR_DEBUG"] == "1"
    assert standin.ENV_AT_IMPORT["XLA_HLO_DEBUG"] == "1"


def test_synchronizes_inside_the_profiled_block_every_step(neuron_run):
    _, _, standin, _, _ = neuron_run
    # each recorded step waits for the device before it closes (the profiler's own
    # warm-up step synchronizes too, while not recording)
    assert sum(standin.SYNCHRONIZED) == len(VARIANTS) * STEPS


def test_keeps_torchneuron_layout_one_folder_per_process(neuron_run):
    out, _, _, profiling, _ = neuron_run
    for variant in VARIANTS:
        (proc,) = [p for p in (out / variant).iterdir() if "_pid_" in p.name]
        assert proc.name == f"{profiling.INSTANCE}_pid_{os.getpid()}"
        (session,) = list(proc.iterdir())
        assert sorted(p.name for p in session.iterdir()) == [
            "neff_4242_vnc_0.neff", "ntrace.pb", "profile_nc_0_session_0.ntff",
            "trace.json", "trace_info.pb"]
        m = manifest(out / variant)
        assert m["traces"] == [str((session / "trace.json").relative_to(out / variant))]
        assert m["profiler"]["neuron_config"]["modes"] == ["ProfileMode.DEVICE",
                                                          "ProfileMode.RUNTIME"]
        assert m["profiler"]["synchronize_in_block"] == "torch_neuronx.synchronize()"


def test_runs_neuron_explorer_on_each_session_when_on_path(neuron_run):
    out, _, _, _, calls = neuron_run
    lines = calls.read_text().splitlines()
    assert len(lines) == len(VARIANTS)
    for variant in VARIANTS:
        (record,) = manifest(out / variant)["neuron_explorer"]
        assert record["ran"] is True and record["returncode"] == 0
        assert record["command"][:3] == ["neuron-explorer", "view", "-d"]
        session = record["command"][3]
        assert record["command"][4:] == ["--output-format", "parquet", "--data-path",
                                         record["command"][7], "--ingest-only",
                                         "--display-name", Path(session).name]
        assert (out / variant / record["output"] / "Summary.parquet").is_file()


def test_converts_the_framework_trace_and_lists_what_no_reader_knows(neuron_run):
    out, stdout, *_ = neuron_run
    for variant in VARIANTS:
        converted = manifest(out / variant)["converted"]
        assert converted["output"] == "events.parquet"
        assert len(converted["inputs"]) == 1 and converted["inputs"][0].endswith("trace.json")
        assert step_names(events(out / variant / "events.parquet")) == [
            f"ProfilerStep#{i}" for i in range(1, STEPS + 1)]
        assert [s["path"] for s in converted["not_converted"]] == [
            f"explorer/{Path(converted['inputs'][0]).parent.name}"]
    assert "neurontrace compare" in stdout


def test_neuron_explorer_missing_says_what_to_run(tmp_path: Path, monkeypatch):
    session = tmp_path / "naive" / "i-1_pid_2" / "0001"
    session.mkdir(parents=True)
    (session / "ntrace.pb").write_bytes(b"x")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    (record,) = neuron.explore(tmp_path / "naive")
    assert record["ran"] is False
    assert "neuron-explorer is not on PATH; run: neuron-explorer view -d" in record["reason"]
    assert "--output-format parquet" in record["reason"]
