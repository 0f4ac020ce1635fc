"""The committed CUDA captures (fixtures/capture/cuda*, real: an NVIDIA H200) answer the
study's questions: which op owns the device, how many launches, and the eps copy."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from neurontrace import analyses

FIXTURES = Path(__file__).parents[2] / "fixtures"
STUDY = FIXTURES / "capture" / "cuda"
EPS = FIXTURES / "capture" / "cuda-eps-copy"
STEPS = 5


def device_ops(path: Path) -> dict[str, tuple[int, float]]:
    table = analyses.ops(analyses.events(path), layer="device")
    return {r["name"]: (r["calls"], r["share"]) for r in table.iter_rows(named=True)}


def test_the_manifest_says_where_it_was_recorded() -> None:
    study = json.loads((STUDY / "manifest.json").read_text())
    assert study["device"]["name"] == "NVIDIA H200"
    assert study["versions"]["torch"].startswith("2.11.0")
    assert study["workload"]["dtype"] == "bfloat16"


def test_naive_device_time_is_owned_by_mul_with_three_launches_a_step() -> None:
    share = device_ops(STUDY / "naive" / "trace.json.gz")
    assert set(share) == {"aten::mul", "aten::mean", "aten::add", "aten::rsqrt"}
    assert share["aten::mul"][0] == 3 * STEPS
    assert share["aten::mul"][1] == max(s for _, s in share.values())
    assert sum(s for _, s in share.values()) == pytest.approx(1.0)


def test_fused_variants_launch_one_kernel_a_step() -> None:
    for variant in ("rms_norm", "compiled"):
        share = device_ops(STUDY / variant / "trace.json.gz")
        assert sum(calls for calls, _ in share.values()) == STEPS, variant
        assert "aten::mul" not in share


def test_every_kernel_is_linked_to_the_op_that_launched_it() -> None:
    for variant in ("naive", "rms_norm", "compiled"):
        df = analyses.events(STUDY / variant / "trace.json.gz").collect()
        kernels = df.filter(pl.col("category") == "kernel")
        assert kernels.height >= STEPS
        assert kernels["framework_row"].null_count() == 0, variant


def test_eps_kept_on_the_host_is_one_tiny_copy_a_step() -> None:
    found = analyses.copies(analyses.events(EPS / "eps_copied" / "trace.json.gz"))
    assert found.height == STEPS
    assert set(found["direction"]) == {"h2d"} and all(found["tiny"])
    assert set(found["bytes"]) == {2}  # one bfloat16 scalar
    clean = analyses.copies(analyses.events(EPS / "eps_scalar" / "trace.json.gz"))
    assert clean.height == 0


def test_every_cuda_fixture_has_its_provenance_in_the_readme() -> None:
    readme = (FIXTURES / "README.md").read_text()
    for run in (STUDY, EPS):
        for p in run.rglob("*.gz"):
            assert f"`{p.relative_to(FIXTURES).as_posix()}`" in readme, p
