"""The summary `neurontrace capture` ends with: the analyses' own figures, the ones
`neurontrace report` / `ops` print for the same run (issue 14; issue 16 item 7)."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from neurontrace.capture import report
from neurontrace.capture.tables import convert_folder
from neurontrace.cli.main import cli
from neurontrace.views import terminal

from support import FIXTURES

CAPTURES = FIXTURES / "capture"
VARIANTS = [(device, variant) for device in ("cuda", "cpu")
            for variant in ("naive", "rms_norm", "compiled")]


def cli_json(*args: str) -> Any:
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def captured(device: str, variant: str, tmp: Path) -> Path:
    """The event table a capture writes for a committed fixture variant: its folder
    converted the way `neurontrace capture` converts it."""
    folder = tmp / variant
    shutil.copytree(CAPTURES / device / variant, folder)
    record = convert_folder(folder)
    assert record["output"] == "events.parquet", record
    return folder / "events.parquet"


@pytest.mark.parametrize(("device", "variant"), VARIANTS)
def test_the_summary_figures_are_those_of_report_and_ops(device: str, variant: str,
                                                         tmp_path: Path) -> None:
    events = captured(device, variant, tmp_path)
    got = report.summarise(variant, events)
    trace = str(CAPTURES / device / variant / "trace.json.gz")
    said = cli_json("report", trace, "--top", str(report.TOP))
    on_device = bool(said["device_ops"])
    assert got.basis == (report.DEVICE if on_device else report.HOST)
    table = said["device_ops" if on_device else "host_ops"]
    assert [op for op, _ in got.top] == [row["name"] for row in table]
    assert [share for _, share in got.top] == pytest.approx([row["share"] for row in table],
                                                            rel=1e-12)
    ops = cli_json("ops", trace, "--layer", "device" if on_device else "framework",
                   "--top", str(report.TOP))
    assert [(op, pytest.approx(share, rel=1e-12)) for op, share in got.top] == [
        (row["name"], row["share"]) for row in ops]
    walls = [row["wall_ns"] for row in cli_json("steps", trace)]
    assert got.steps == len(walls) == 5
    assert got.step_ns == int(statistics.median(walls))


def test_cuda_naive_mul_has_85_2_percent_of_device_time_and_no_annotation_is_ranked(
        tmp_path: Path) -> None:
    got = report.summarise("naive", captured("cuda", "naive", tmp_path))
    assert got.basis == "device time"
    (first, share), *rest = got.top
    assert (first, f"{share:.1%}") == ("aten::mul", "85.2%")
    assert not any(op.startswith("ProfilerStep") for op, _ in got.top)
    # gpu_user_annotation spans are not device work: the shares are of kernels only
    assert sum(s for _, s in got.top) <= 1.0 and rest[0][0] == "aten::mean"


def test_cpu_compiled_shares_are_of_host_self_time_as_report_says(tmp_path: Path) -> None:
    got = report.summarise("compiled", captured("cpu", "compiled", tmp_path))
    shares = dict(got.top)
    assert got.basis == "self CPU time"  # the host view: key_averages' Self CPU
    region = next(op for op in shares if op.startswith("Torch-Compiled Region"))
    said = cli_json("report", str(CAPTURES / "cpu" / "compiled" / "trace.json.gz"))
    assert shares[region] == pytest.approx(
        next(r["share"] for r in said["host_ops"] if r["name"] == region), rel=1e-12)
    assert shares[region] < 0.5  # not the 95.8% the old summary gave


def test_the_printed_lines_show_the_summary_figures(tmp_path: Path) -> None:
    summaries = [report.summarise(v, captured("cuda", v, tmp_path)) for v in
                 ("naive", "compiled")]
    summaries.append(report.Summary("rms_norm", skipped="no GPU"))
    lines = terminal.capture_summary(summaries)
    assert lines[0].split() == ["variant", "events", "step", "(median)", "top", "ops", "by",
                                "device", "time"]
    naive = lines[1]
    assert naive.startswith("naive ") and "aten::mul 85.2%, aten::mean 11.6%" in naive
    assert f"{summaries[0].step_ns / 1e6:.3f} ms" in naive
    assert f"{summaries[0].events:,}" in naive.split()
    assert lines[3].split() == ["rms_norm", "SKIPPED:", "no", "GPU"]
