"""`neurontrace capture -- CMD`: a user's program profiles itself with the helper."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from neurontrace import schema as S

from capturing import capture, events, manifest, step_names

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

TRAIN = """
import torch
from neurontrace.capture import profile

x = torch.randn(8, 8)
with profile() as prof:
    for _ in range(6):
        x = torch.tanh(x @ x)
        prof.step()
{after}
"""


def program(tmp_path: Path, after: str = "") -> str:
    path = tmp_path / "train.py"
    path.write_text(TRAIN.format(after=after))
    return str(path)


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    if torchrun is None:
        pytest.skip("torchrun is not installed next to this python")
    tmp = tmp_path_factory.mktemp("cmd")
    out = tmp / "train"
    # torchrun leaves a /tmp/torchelastic_* folder behind: keep it in the test's folder
    before = os.environ.get("TMPDIR")
    os.environ["TMPDIR"] = str(tmp_path_factory.mktemp("torchrun-tmp"))
    try:
        capture("--out", str(out), "--steps", "2", "--", torchrun, "--standalone",
                "--nproc_per_node", "2", program(tmp))
    finally:
        if before is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = before
    return out


def test_each_rank_writes_its_own_folder(two_ranks):
    assert sorted(p.name for p in two_ranks.iterdir()) == ["manifest.json", "rank0", "rank1"]
    for r in (0, 1):
        m = manifest(two_ranks / f"rank{r}")
        assert m["kind"] == "rank" and m["rank"] == r and m["world_size"] == 2
        assert m["device"]["kind"] == "cpu"
        assert m["profiler"]["schedule"]["active"] == 2
        assert {f["path"] for f in m["files"]} == {"trace.json.gz", "events.parquet"}


def test_each_rank_records_the_steps_it_was_asked_for(two_ranks):
    for r in (0, 1):
        df = events(two_ranks / f"rank{r}" / "events.parquet")
        assert step_names(df) == ["ProfilerStep#1", "ProfilerStep#2"]
        assert set(df[S.RANK].to_list()) == {r}


def test_the_run_manifest_records_the_command_and_the_environment_it_set(two_ranks):
    m = manifest(two_ranks)
    assert m["kind"] == "command" and m["returncode"] == 0
    assert m["ranks"] == ["rank0", "rank1"]
    assert m["workload"]["command"][1:] == ["--standalone", "--nproc_per_node", "2",
                                            m["workload"]["command"][-1]]
    assert m["environment"]["NEURONTRACE_CAPTURE_STEPS"] == "2"
    assert m["environment"]["NEURONTRACE_CAPTURE_DEVICE"] == "auto"
    assert "--" in m["command_line"]


def test_a_program_that_never_uses_the_helper_is_an_error_and_leaves_nothing(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text("print('hello')\n")
    out = tmp_path / "run"
    result = capture("--out", str(out), "--", sys.executable, str(script), ok=False)
    assert result.exit_code == 3
    assert "wrote no trace" in result.output and "neurontrace.capture.profile()" in result.output
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["plain.py"]  # no staging left behind


def test_a_program_that_fails_after_profiling_keeps_its_traces_and_exits_3(tmp_path):
    out = tmp_path / "run"
    result = capture("--out", str(out), "--steps", "1", "--", sys.executable,
                     program(tmp_path, after="raise SystemExit(7)"), ok=False)
    assert result.exit_code == 3
    assert "exited with status 7" in result.output
    assert manifest(out)["returncode"] == 7
    assert step_names(events(out / "rank0" / "events.parquet")) == ["ProfilerStep#1"]


def test_a_command_that_cannot_start_is_bad_input(tmp_path):
    out = tmp_path / "made" / "for" / "run"
    result = capture("--out", str(out), "--", str(tmp_path / "no-such-program"), ok=False)
    assert result.exit_code == 2
    assert "no-such-program: cannot run it" in result.output
    assert list(tmp_path.iterdir()) == []  # the folders made for --out are gone too


def test_the_study_options_do_not_apply_to_a_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default --out is runs/... here
    result = capture("--shape", "2x2", "--", sys.executable, "-c", "pass", ok=False)
    assert result.exit_code == 2 and "with -- CMD the command profiles itself" in result.output
    assert list(tmp_path.iterdir()) == []
