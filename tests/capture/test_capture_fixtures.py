"""The committed CPU captures (fixtures/capture/cpu, real) read as the study says they should."""

from __future__ import annotations

from pathlib import Path

import pytest

from capturing import count, events, manifest, step_names

FIXTURES = Path(__file__).parents[2] / "fixtures"
RUN = FIXTURES / "capture" / "cpu"
VARIANTS = ("naive", "rms_norm", "compiled")
STEPS = 5


@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_has_five_profiled_steps(variant):
    assert step_names(events(RUN / variant / "trace.json.gz")) == [
        f"ProfilerStep#{i}" for i in range(1, STEPS + 1)]


def test_naive_is_six_ops_a_step_and_mul_is_half_of_them():
    df = events(RUN / "naive" / "trace.json.gz")
    assert [count(df, op) for op in ("aten::mul", "aten::mean", "aten::add", "aten::rsqrt")] \
        == [3 * STEPS, STEPS, STEPS, STEPS]


def test_rms_norm_and_compiled_replace_the_six_ops():
    fused = events(RUN / "rms_norm" / "trace.json.gz")
    compiled = events(RUN / "compiled" / "trace.json.gz")
    assert count(fused, "aten::rms_norm") == STEPS
    assert count(compiled, "Torch-Compiled Region: 0/0") == STEPS
    assert count(compiled, "aten::mul") == 0


def test_the_manifests_describe_the_committed_files():
    study = manifest(RUN)
    assert study["device"]["kind"] == "cpu" and study["versions"]["torch"] == "2.13.0+cpu"
    assert study["workload"]["shape"] == [4, 128, 1024] and study["check"]["ok"] is True
    on_disk = {p.relative_to(RUN).as_posix(): p.stat().st_size
               for p in RUN.rglob("*") if p.is_file() and p.name != "manifest.json"}
    listed = {f["path"]: f["bytes"] for f in study["files"] if not f["path"].endswith(
        "manifest.json")}
    assert listed == on_disk


def test_every_fixture_file_has_its_provenance_in_the_readme():
    readme = (FIXTURES / "README.md").read_text()
    for p in RUN.rglob("*.gz"):
        assert f"`{p.relative_to(FIXTURES).as_posix()}`" in readme, p
