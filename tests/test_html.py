"""`neurontrace report --html`: one self-contained page that loads and draws in a browser."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from PIL import Image

from neurontrace import analyses
from neurontrace import schema as S
from neurontrace.cli.main import cli
from neurontrace.cli.report import analysed
from neurontrace.views import html

from support import FIXTURES

CUDA = FIXTURES / "capture" / "cuda"
EPS = FIXTURES / "capture" / "cuda-eps-copy" / "eps_copied" / "trace.json.gz"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def page_of(runs: dict[str, pl.LazyFrame], out: Path, max_events: int = html.MAX_EVENTS) -> Path:
    """The page of ``runs`` as ``report --html`` writes it: the analyses computed once by
    the caller (:func:`neurontrace.cli.report.analysed`), the page only embedding them."""
    comparison = analyses.compare(runs, top=10) if len(runs) > 1 else None
    done, changed = analysed(runs)
    return html.write(done, out, comparison, max_events=max_events, changes=changed)


def embedded(page: str) -> dict:
    m = re.search(r'<script id="NEURONTRACE" type="application/json">(.*?)</script>', page,
                  re.S)
    assert m
    return json.loads(m.group(1))


def test_the_page_is_self_contained(tmp_path: Path) -> None:
    out = page_of({"naive": analyses.events(CUDA / "naive" / "trace.json.gz")}, tmp_path / "r.html")
    page = out.read_text()
    assert not re.search(r"\b(?:src|href)\s*=", page)  # nothing loaded from anywhere
    assert "<link" not in page and "@import" not in page
    assert not re.search(r"https?://", page)
    assert "default-src 'none'" in page  # and the browser is told to fetch nothing


def test_the_timeline_is_capped_and_says_so(tmp_path: Path) -> None:
    lf = analyses.events(EPS)
    data = embedded(page_of({"eps": lf}, tmp_path / "r.html", max_events=40).read_text())
    tl = data["runs"][0]["timeline"]
    assert tl["shown"] == len(tl["events"]) == 40
    assert tl["total"] == lf.collect().height and tl["capped"] and tl["from_step"]
    starts = [e[1] for e in tl["events"]]
    assert starts == sorted(starts) and starts[0] == 0  # from the first step, in order


def test_figures_are_the_analyses(tmp_path: Path) -> None:
    lf = analyses.events(EPS)
    run = html.page_data(analysed({"eps": lf})[0])["runs"][0]
    r = analyses.report(lf, top=10)
    assert run["device_ops"] == r.device_ops.to_dicts()
    assert run["idle"] == r.idle.to_dicts()
    assert run["transfers"] == analyses.copies(lf).height == sum(c["copies"] for c in run["copies"])


def test_the_page_holds_the_findings_advise_gives_with_the_terminal_s_figures(
        tmp_path: Path) -> None:
    naive = CUDA / "naive" / "trace.json.gz"
    out = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["report", str(naive), "--html", str(out)])
    assert res.exit_code == 0, res.output
    run = embedded(out.read_text())["runs"][0]
    advised = json.loads(CliRunner().invoke(cli, ["advise", str(naive), "--json"]).stdout)
    assert run["findings_total"] == len(advised) == len(run["findings"]) == 5
    assert [{k: v for k, v in f.items() if k != "at_stake_text"} for f in run["findings"]] \
        == advised
    fusion = next(f for f in run["findings"] if f["rule"] == "fusion")
    assert fusion["at_stake_text"] == "36.0 µs to 46.8 µs a step (20.7% of the step, 74.5% " \
        "of the device time)"
    assert f"at stake: {fusion['at_stake_text']}" in res.stdout  # as the terminal words it


def test_a_trace_of_profiler_ranges_says_what_it_has_and_lacks_as_the_terminal_does(
        tmp_path: Path) -> None:
    # a CUPTI profiler trace: launches on the host, counter ranges on the device, no kernel
    path = tmp_path / "ranges.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::conv2d", "pid": 1, "tid": 1, "ts": 0,
         "dur": 100, "args": {"External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
         "ts": 10, "dur": 5, "args": {"External id": 1, "correlation": 1}},
        {"ph": "X", "cat": "cuda_profiler_range", "name": "conv_kernel", "pid": 0, "tid": 1,
         "ts": 20, "dur": 30, "args": {"device": 0}},
    ]}))
    out = tmp_path / "r.html"
    done = CliRunner().invoke(cli, ["report", str(path), "--html", str(out)])
    assert done.exit_code == 0, done.output
    said = embedded(out.read_text())["runs"][0]["no_device_work"]
    assert said == ("No device work in this trace: its device rows are 1 CUPTI profiler "
                    "range(s) (counters measured over a range), not kernels or copies. 1 "
                    "runtime call(s) on the host; the device side of their launches and "
                    "copies is not in the trace.")
    assert said.split(". ")[0] in done.stdout  # the terminal's words
    assert "host only" not in said
    # a trace with device work has nothing to explain
    naive = embedded(page_of({"naive": analyses.events(CUDA / "naive" / "trace.json.gz")},
                             tmp_path / "n.html").read_text())
    assert naive["runs"][0]["no_device_work"] is None


def test_names_cannot_close_the_script(tmp_path: Path) -> None:
    frame = analyses.events(CUDA / "naive" / "trace.json.gz").collect().with_columns(
        pl.lit("</script><b>x").alias(S.NAME))
    text = page_of({"odd": frame.lazy()}, tmp_path / "r.html").read_text()
    assert "</script><b>x" not in text
    assert "</script><b>x" in embedded(text)["runs"][0]["timeline"]["names"]


def test_the_command_writes_the_page_with_a_comparison(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["report", str(CUDA / "naive" / "trace.json.gz"),
                                   str(CUDA / "compiled" / "trace.json.gz"), "--html", str(out)])
    assert res.exit_code == 0, res.output
    data = embedded(out.read_text())
    assert [r["name"] for r in data["runs"]] == ["naive", "compiled"]
    assert {row["run"] for row in data["compare"]} == {"naive", "compiled"}
    assert [p.name for p in tmp_path.iterdir()] == ["r.html"]


def test_the_page_of_several_runs_says_which_findings_appeared_or_disappeared_as_compare(
        tmp_path: Path) -> None:
    naive, fused = (str(CUDA / v / "trace.json.gz") for v in ("naive", "rms_norm"))
    out = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["report", naive, fused, "--html", str(out)])
    assert res.exit_code == 0, res.output
    rows = embedded(out.read_text())["changes"]
    compared = json.loads(CliRunner().invoke(cli, ["compare", naive, fused, "--json"]).stdout)
    assert [{k: v for k, v in r.items() if k != "at_stake_text"} for r in rows] \
        == compared["findings"]
    by = {(r["rule"], r["change"]): r for r in rows}
    fusion = by[("fusion", "disappeared")]
    assert fusion["run"] == "rms_norm" and fusion["against"] == "naive"
    assert fusion["at_stake_text"] == "was 36.0 µs to 46.8 µs a step"  # as compare says
    said = CliRunner().invoke(cli, ["compare", naive, fused]).stdout
    assert f"({fusion['at_stake_text']})" in said
    assert ("dominant-op", "disappeared") in by
    assert all(r["at_stake_text"].endswith(" a step") for r in rows)
    one = tmp_path / "one.html"
    assert CliRunner().invoke(cli, ["report", naive, "--html", str(one)]).exit_code == 0
    assert "changes" not in embedded(one.read_text())  # one run: nothing to compare


# -- in a real browser ------------------------------------------------------------------

def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM
    with tempfile.TemporaryDirectory() as profile:
        return subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}",
             "--enable-logging=stderr", "--v=0", *args],
            capture_output=True, text=True, timeout=120,
        )


def _png_pixels(path: Path) -> list[tuple[int, ...]]:
    """The RGB pixels of a PNG, row by row."""
    with Image.open(path) as img:
        data = img.convert("RGB").tobytes()
    return [tuple(data[i:i + 3]) for i in range(0, len(data), 3)]


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (Debian: apt-get "
                    "install chromium; .ci/run installs it)")
def test_in_headless_chromium_the_page_loads_without_errors_and_draws(tmp_path: Path) -> None:
    out = page_of({"naive": analyses.events(CUDA / "naive" / "trace.json.gz"),
                "eps": analyses.events(EPS)}, tmp_path / "r.html")
    dom = _chromium("--dump-dom", out.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    body = re.search(r"<body[^>]*>", dom.stdout)
    assert body and 'data-rendered="yes"' in body.group() and 'data-errors="0"' in body.group()
    console = [ln for ln in dom.stderr.splitlines() if "CONSOLE" in ln or "Uncaught" in ln]
    assert console == []
    assert "aten::mul" in dom.stdout and "host dispatch" in dom.stdout
    assert "RMSNorm written out as 6 ops" in dom.stdout  # the findings are drawn
    assert "at stake: 36.0 µs to 46.8 µs a step" in dom.stdout
    # and those that changed between the runs, against the first
    assert "Findings against naive (neurontrace advise on each run)" in dom.stdout
    assert re.search(r"eps: \d+ disappeared, \d+ appeared, \d+ kept", dom.stdout)
    assert "host-scalar" in dom.stdout and "at stake: 6.3 µs a step" in dom.stdout

    shot = tmp_path / "r.png"
    res = _chromium("--window-size=1000,1600", f"--screenshot={shot}", out.as_uri())
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    pixels = _png_pixels(shot)
    inked = sum(p != (255, 255, 255) for p in pixels) / len(pixels)
    assert inked > 0.05  # not a blank page
    colours = set(pixels)
    assert len(colours) > 50  # text, bars and a drawn timeline, not a flat fill
    framework, device = (0x3B, 0x6F, 0xD6), (0x2F, 0x9E, 0x5B)
    assert sum(p == framework for p in pixels) > 200  # host bars and timeline slices
    assert sum(p == device for p in pixels) > 200  # device bars and kernels
