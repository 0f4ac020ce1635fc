"""``neurontrace advise PATH [--json] [--top N] [--fail-on SEVERITY]`` (issue 17): the
findings through the command line, on the real RMSNorm captures and the fixtures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from neurontrace.cli.main import cli

from support import FIXTURES

NAIVE = FIXTURES / "capture" / "cuda" / "naive" / "trace.json.gz"
RMS_NORM = FIXTURES / "capture" / "cuda" / "rms_norm" / "trace.json.gz"
EPS = FIXTURES / "capture" / "cuda-eps-copy" / "eps_copied" / "trace.json.gz"
NEURON = FIXTURES / "neuron" / "explorer_rmsnorm_vnc_0"
EMPTY = FIXTURES / "kineto" / "empty-events.json"
FIELDS = {"rule", "scope", "severity", "title", "ops", "at_stake_ns", "share", "evidence",
          "hint"}


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, ["advise", *map(str, args)])


def findings(*args: str | Path) -> list[dict]:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert isinstance(out, list)
    return out


def test_advise_on_naive_names_the_rmsnorm_chain_and_its_fused_replacement() -> None:
    result = run(NAIVE)
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert "fusion: RMSNorm written out as 6 ops (mul, mean, add, rsqrt, mul, mul)" in text
    assert "try: use torch.rms_norm (torch.nn.RMSNorm), or torch.compile" in text
    assert "ops: aten::mul, aten::mean, aten::add, aten::rsqrt, aten::mul, aten::mul" in text


def test_json_lists_every_finding_with_the_fields_the_issue_names() -> None:
    out = findings(NAIVE)
    assert len(out) >= 4  # every finding: --json is not cut to a --top
    for f in out:
        assert FIELDS <= set(f)
        assert set(f["at_stake_ns"]) == {"low", "high"}
        assert f["at_stake_ns"]["low"] <= f["at_stake_ns"]["high"]
    (fusion,) = [f for f in out if f["rule"] == "fusion"]
    assert fusion["ops"] == ["aten::mul", "aten::mean", "aten::add", "aten::rsqrt",
                             "aten::mul", "aten::mul"]
    assert fusion["at_stake_ns"]["low"] < fusion["at_stake_ns"]["high"]  # an estimate
    rules = [f["rule"] for f in out]
    assert {"fusion", "dominant-op", "launch-bound", "step-outliers"} <= set(rules)


def test_json_top_keeps_the_most_severe_findings() -> None:
    every = findings(NAIVE)
    assert findings(NAIVE, "--top", "2") == every[:2]
    assert findings(NAIVE, "--top", "0") == every


def test_the_terminal_shows_top_findings_of_all() -> None:
    result = run(NAIVE, "--top", "1")
    assert result.exit_code == 0
    assert f"(1 of {len(findings(NAIVE))} findings, most severe first)" in result.stdout
    assert result.stdout.count("at stake:") == 1


def test_the_eps_copy_is_advised_at_aten_to() -> None:
    (f,) = [f for f in findings(EPS) if f["rule"] == "host-scalar"]
    assert f["ops"] == ["aten::to"]
    assert f["at_stake_ns"]["low"] == f["at_stake_ns"]["high"] > 0  # measured


def test_no_fusion_is_advised_on_the_fused_run() -> None:
    assert "fusion" not in {f["rule"] for f in findings(RMS_NORM)}


def test_a_trace_without_findings_says_so() -> None:
    result = run(EMPTY)
    assert result.exit_code == 0
    assert "No findings" in result.stdout
    assert findings(EMPTY) == []


@pytest.mark.parametrize("severity", ["info", "low", "medium", "high"])
@pytest.mark.parametrize("path", [NAIVE, NEURON, EMPTY], ids=["cuda", "neuron", "empty"])
def test_fail_on_exits_3_when_a_finding_is_at_or_above_the_severity(path: Path,
                                                                     severity: str) -> None:
    order = ("info", "low", "medium", "high")
    found = findings(path)
    expected = 3 if any(order.index(f["severity"]) >= order.index(severity)
                        for f in found) else 0
    result = run(path, "--fail-on", severity)
    assert result.exit_code == expected, result.output
    assert result.stdout.count("at stake:") == min(len(found), 10)  # printed either way


def test_fail_on_high_fires_on_the_naive_rmsnorm() -> None:
    # its fusion finding is high: 36.0 to 46.8 µs of a 199.6 µs median step
    (fusion,) = [f for f in findings(NAIVE) if f["rule"] == "fusion"]
    assert fusion["severity"] == "high"
    assert run(NAIVE, "--fail-on", "high").exit_code == 3


def test_fail_on_with_json_still_prints_the_findings() -> None:
    result = run(NAIVE, "--json", "--fail-on", "high")
    assert result.exit_code == 3
    assert json.loads(result.stdout)


def test_fail_on_never_fires_on_a_trace_without_findings() -> None:
    assert run(EMPTY, "--fail-on", "info").exit_code == 0


def test_bad_input_exits_2_not_3(tmp_path: Path) -> None:
    missing = tmp_path / "missing.parquet"
    result = run(missing, "--fail-on", "info")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "missing.parquet" in result.stderr


def test_an_unknown_severity_is_a_usage_error() -> None:
    assert run(NAIVE, "--fail-on", "severe").exit_code == 2


def test_fail_on_exit_codes_of_the_installed_command() -> None:
    exe = Path(sys.executable).parent / "neurontrace"
    codes = [subprocess.run([str(exe), "advise", str(path), "--fail-on", s],
                            capture_output=True, check=False).returncode
             for path, s in ((NAIVE, "high"), (EMPTY, "info"))]
    assert codes == [3, 0]


# -- the Findings part of `neurontrace report` ------------------------------------------------

def cli_out(*args: str | Path) -> str:
    result = CliRunner().invoke(cli, [*map(str, args)])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_report_shows_the_findings_of_advise_with_the_same_figures() -> None:
    advised = findings(NAIVE)
    assert {f["rule"] for f in advised} >= {"fusion", "dominant-op", "launch-bound"}
    report = cli_out("report", NAIVE)
    part = report[report.index("Findings (5, most severe first; neurontrace advise: "):]
    said = cli_out("advise", NAIVE)
    blocks = said.split("\n\n")[1:]  # after the heading: one block per finding, in order
    assert len(blocks) == len(advised) == 5
    lines = part.splitlines()[1:]
    for i, block in enumerate(blocks):  # its title and time at stake, in advise's order
        title, at_stake = block.strip("\n").splitlines()[:2]
        assert lines[2 * i:2 * i + 2] == ["  " + title, "  " + at_stake]
    assert len(lines) == 2 * len(blocks)
    assert "RMSNorm written out as 6 ops" in part and "36.0 µs to 46.8 µs a step" in part


def test_report_json_has_the_findings_as_advise_json_gives_them() -> None:
    doc = json.loads(cli_out("report", NAIVE, "--json"))
    assert doc["findings"] == findings(NAIVE)
    two = json.loads(cli_out("report", NAIVE, EPS, "--json"))
    assert [d["findings"] for d in two] == [findings(NAIVE), findings(EPS)]
    assert json.loads(cli_out("report", NAIVE, "--json", "--top", "2"))["findings"] == \
        findings(NAIVE, "--top", "2")


def test_report_top_cuts_the_findings_and_says_how_many_there_are() -> None:
    part = cli_out("report", NAIVE, "--top", "2").split("\nFindings ")[1]
    assert part.startswith("(2 of 5, most severe first; neurontrace advise: ")
    assert part.count("at stake: ") == 2


def test_report_of_a_trace_without_findings_says_none() -> None:
    assert "Findings\n  none: no rule finds time at stake in this trace" in cli_out(
        "report", EMPTY)
    assert json.loads(cli_out("report", EMPTY, "--json"))["findings"] == []


@pytest.mark.parametrize("path", [NAIVE, RMS_NORM, EPS, NEURON],
                         ids=["naive", "rms_norm", "eps", "neuron"])
def test_advise_given_the_report_finds_the_same_without_computing_its_analyses_again(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from neurontrace import analyses
    from neurontrace.analyses import advice
    from neurontrace.analyses.advice import base

    lf = analyses.events(path)
    alone = advice.advise(lf)
    report = analyses.report(lf, top=analyses.ALL)
    wall = analyses.extent(lf)[0]
    for name in ("steps", "gaps", "copies", "device_ops", "host_ops", "extent"):
        monkeypatch.setattr(base, name, lambda *a, _n=name, **k: pytest.fail(f"{_n} again"))
    assert advice.advise(lf, report, wall) == alone
