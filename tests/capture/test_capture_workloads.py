"""What `neurontrace capture` profiles, and how it refuses what it cannot."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from neurontrace.capture import profile

from capturing import capture, events, manifest, step_names

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

TWO_WAYS = """
import torch

def workload(device):
    x = torch.arange(12.0, device=device).reshape(3, 4)
    return {"sum_dim": lambda: x.sum(-1), "matmul": lambda: x @ torch.ones(4, device=device)}
"""


def write(tmp_path: Path, text: str, name: str = "work.py") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_a_file_workload_profiles_each_variant_it_returns(tmp_path):
    src = write(tmp_path, TWO_WAYS)
    out = tmp_path / "run"
    result = capture("--workload", str(src), "--out", str(out), "--steps", "2", "--device", "cpu")
    assert sorted(p.name for p in out.iterdir()) == ["manifest.json", "matmul", "sum_dim"]
    for v in ("sum_dim", "matmul"):
        assert step_names(events(out / v / "events.parquet")) == ["ProfilerStep#1",
                                                                  "ProfilerStep#2"]
    m = manifest(out)
    assert m["workload"] == {"name": "work", "file": str(src.resolve()),
                             "sha256": hashlib.sha256(src.read_bytes()).hexdigest()}
    assert m["check"]["reference"] == "sum_dim" and m["check"]["ok"] is True
    assert "neurontrace compare" in result.stdout


def test_a_single_function_is_one_variant_named_after_the_file(tmp_path):
    src = write(tmp_path, "import torch\ndef workload(device):\n"
                          "    x = torch.ones(4, device=device)\n    return lambda: x * 2\n",
                name="double.py")
    out = tmp_path / "run"
    result = capture("--workload", str(src), "--out", str(out), "--steps", "1")
    assert (out / "double" / "events.parquet").exists()
    assert manifest(out)["check"] == {"reference": "double", "compared": False,
                                      "reason": "fewer than two variants ran"}
    assert "neurontrace compare" not in result.stdout  # nothing to compare it with


def test_variants_that_disagree_stop_the_capture_before_profiling(tmp_path):
    src = write(tmp_path, TWO_WAYS.replace("x @ torch.ones(4, device=device)", "x.sum(-1) + 1"))
    out = tmp_path / "run"
    result = capture("--workload", str(src), "--out", str(out), ok=False)
    assert result.exit_code == 3
    assert "variants disagree with sum_dim" in result.output and "--no-check" in result.output
    assert not out.exists()


def test_no_check_profiles_disagreeing_variants_and_says_it_did_not_check(tmp_path):
    src = write(tmp_path, TWO_WAYS.replace("x @ torch.ones(4, device=device)", "x.sum(-1) + 1"))
    out = tmp_path / "run"
    capture("--workload", str(src), "--out", str(out), "--steps", "1", "--no-check")
    assert manifest(out)["check"] == {"compared": False, "reason": "--no-check"}


def test_a_variant_that_raises_fails_the_capture_naming_it(tmp_path):
    src = write(tmp_path, "def workload(device):\n    return {'bad': lambda: 1 / 0}\n")
    result = capture("--workload", str(src), "--out", str(tmp_path / "run"), ok=False)
    assert result.exit_code == 3
    assert "variant bad failed while warming up: ZeroDivisionError" in result.output


def test_compiled_is_skipped_with_the_reason_when_torch_compile_cannot_work(tmp_path,
                                                                            monkeypatch):
    def no_compiler(*args, **kwargs):
        raise RuntimeError("no working C++ compiler found")

    monkeypatch.setattr(torch, "compile", no_compiler)
    out = tmp_path / "run"
    result = capture("--out", str(out), "--shape", "2x8", "--steps", "1", "--device", "cpu")
    skipped = "RuntimeError: no working C++ compiler found"
    assert f"compiled  SKIPPED: {skipped}" in result.stdout
    assert f"compiled: SKIPPED, {skipped}" in result.output  # the progress log too
    (compiled,) = [v for v in manifest(out)["variants"] if v["name"] == "compiled"]
    assert compiled == {**compiled, "status": "skipped", "reason": skipped}
    assert manifest(out / "compiled")["status"] == "skipped"
    assert not (out / "compiled" / "trace.json.gz").exists()
    assert (out / "naive" / "events.parquet").exists() and (out / "rms_norm").is_dir()


@pytest.mark.parametrize(("args", "message"), [
    (["--workload", "llama"], "--workload 'llama': neither a bundled workload (rmsnorm)"),
    (["--workload", "missing.py"], "--workload missing.py: no such file"),
    (["--shape", "2x0"], "--shape '2x0': expected positive sizes like 1x2048x4096"),
    (["--shape", "big"], "--shape 'big': expected positive sizes"),
])
def test_bad_arguments_exit_2_with_one_line(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    result = capture(*args, "--out", str(tmp_path / "run"), "--device", "cpu", ok=False)
    assert result.exit_code == 2, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith(f"neurontrace: error: {message}"), last
    assert not (tmp_path / "run").exists()


def test_a_file_without_a_workload_function_is_bad_input(tmp_path):
    src = write(tmp_path, "def main():\n    pass\n")
    result = capture("--workload", str(src), ok=False)
    assert result.exit_code == 2 and "defines no function `workload(device)`" in result.output


def test_variant_names_must_be_usable_as_folder_names(tmp_path):
    src = write(tmp_path, "def workload(device):\n    return {'../up': lambda: 1}\n")
    result = capture("--workload", str(src), ok=False)
    assert result.exit_code == 2 and "'../up' is not usable as a folder name" in result.output


def test_shape_and_dtype_belong_to_the_bundled_study(tmp_path):
    src = write(tmp_path, TWO_WAYS)
    result = capture("--workload", str(src), "--dtype", "float16", ok=False)
    assert result.exit_code == 2 and "apply to the bundled rmsnorm study only" in result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_asking_for_cuda_without_a_gpu_is_bad_input(tmp_path):
    result = capture("--device", "cuda", "--out", str(tmp_path / "run"), ok=False)
    assert result.exit_code == 2 and "--device cuda: torch" in result.output
    assert "sees no CUDA device" in result.output


def test_asking_for_neuron_without_torch_neuronx_is_bad_input(tmp_path):
    result = capture("--device", "neuron", "--out", str(tmp_path / "run"), ok=False)
    assert result.exit_code == 2
    assert "--device neuron: torch_neuronx is not installed" in result.output


def test_a_rerun_replaces_the_earlier_run_folder(tmp_path):
    src = write(tmp_path, TWO_WAYS)
    out = tmp_path / "run"
    capture("--workload", str(src), "--out", str(out), "--steps", "1")
    (out / "stale.txt").write_text("from the first run")
    capture("--workload", str(src), "--out", str(out), "--steps", "2")
    assert not (out / "stale.txt").exists()
    assert manifest(out)["steps"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "work.py"]


def test_a_folder_that_is_not_a_run_is_never_replaced(tmp_path):
    out = tmp_path / "precious"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    result = capture("--out", str(out), ok=False)
    assert result.exit_code == 2 and "not a capture run folder" in result.output
    assert (out / "notes.txt").read_text() == "keep me"


def test_the_helper_profiles_a_loop_into_a_rank_folder(tmp_path):
    x = torch.ones(4, 4)
    with profile(tmp_path / "loop", steps=2, device="cpu") as prof:
        for _ in range(5):  # steps past the profiled ones run unprofiled
            x = x @ x / 4
            prof.step()
    folder = tmp_path / "loop" / "rank0"
    assert step_names(events(folder / "trace.json.gz")) == ["ProfilerStep#1", "ProfilerStep#2"]
    m = manifest(folder)
    assert m["kind"] == "rank" and m["rank"] == 0 and m["traces"] == ["trace.json.gz"]
    assert [f["path"] for f in m["files"]] == ["trace.json.gz"]


def test_capture_imports_neither_torch_nor_the_analysis_stack_until_it_runs():
    code = ("import sys, neurontrace.capture, neurontrace.cli.capture\n"
            "from neurontrace.cli.main import cli\n"
            "print(sorted(m for m in ('torch', 'polars', 'pyarrow') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"
