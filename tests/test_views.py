"""Views render computed results and never recompute them (issue 14): the terminal, the
HTML page and the Chrome export take what the analyses returned; `report --html` computes
each analysis once; the progress bar is click's, drawn only on a terminal unless asked."""

from __future__ import annotations

import ast
import io
import json
import re
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

import neurontrace
from neurontrace import analyses
from neurontrace.cli.main import cli
from neurontrace.cli.progress import Bar
from neurontrace.views import chrome

from support import FIXTURES

ROOT = Path(__file__).resolve().parent.parent
VIEWS = ROOT / "neurontrace" / "views"
NAIVE = FIXTURES / "capture" / "cuda" / "naive" / "trace.json.gz"
EPS = FIXTURES / "capture" / "cuda-eps-copy" / "eps_copied" / "trace.json.gz"
#: What a view may take from the analysis package: names of constants and result types.
NOT_COMPUTING = {"ALL", "CAUSES", "OP_PREFIX", "Gaps", "Report"}
ANALYSES = ("report", "gaps", "copies", "copy_summary", "steps", "host_ops", "device_ops",
            "compare", "compare_results", "measure", "extent")
RMS_NORM = FIXTURES / "capture" / "cuda" / "rms_norm" / "trace.json.gz"
INNER = ("gaps", "copies", "steps", "host_ops", "device_ops")


#: The conversion side, which the analyses never import (they read what ``io`` loads).
CONVERSION = ("neurontrace.table", "neurontrace.readers", "neurontrace.workers",
              "neurontrace.convert")


def test_no_analysis_imports_the_conversion_side() -> None:
    analyses_dir = ROOT / "neurontrace" / "analyses"
    for module in sorted(analyses_dir.rglob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom)
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                assert not name.startswith(CONVERSION), (module.name, name)


def test_no_view_imports_an_analysis_function() -> None:
    for module in sorted(VIEWS.glob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "neurontrace.analyses"):
                taken = {a.name for a in node.names}
                assert taken <= NOT_COMPUTING, (module.name, taken - NOT_COMPUTING)
            if isinstance(node, ast.ImportFrom) and node.module == "neurontrace":
                assert "analyses" not in {a.name for a in node.names}, module.name
            if isinstance(node, ast.Import):
                assert not any(a.name.startswith("neurontrace.analyses") for a in node.names)


def count_calls(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[str, str]]:
    """Wrap every analysis function wherever a loaded neurontrace module holds it; count
    the calls by (function, calling module)."""
    calls: Counter[tuple[str, str]] = Counter()
    originals = {getattr(analyses, name): name for name in ANALYSES}

    def counted(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[(name, sys._getframe(1).f_globals.get("__name__", "?"))] += 1
            return fn(*args, **kwargs)
        return wrapper

    wrapped = {fn: counted(fn, name) for fn, name in originals.items()}
    for mod_name, module in list(sys.modules.items()):
        if not mod_name.startswith("neurontrace") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if callable(value) and value in wrapped:
                monkeypatch.setattr(module, attr, wrapped[value])
    return calls


def by_function(calls: Counter[tuple[str, str]]) -> Counter[str]:
    out: Counter[str] = Counter()
    for (name, _caller), n in calls.items():
        out[name] += n
    return out


def test_report_html_computes_each_analysis_once(monkeypatch: pytest.MonkeyPatch,
                                                 tmp_path: Path) -> None:
    import neurontrace.cli.report  # noqa: F401  (loaded, so that its bindings are counted)

    calls = count_calls(monkeypatch)
    out = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["report", str(EPS), "--html", str(out)])
    assert res.exit_code == 0, res.output
    assert out.is_file() and "Device idle time" in res.stdout
    assert not [c for c in calls if c[1].startswith("neurontrace.views")]
    per = by_function(calls)
    assert per["report"] == 1
    for name in ("gaps", "copies", "steps", "host_ops", "device_ops"):
        assert per[name] == 1, (name, calls)  # once, inside the one report
    assert per["compare"] == 0


def test_report_html_of_two_runs_computes_each_report_once_and_compares_once(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import neurontrace.cli.report  # noqa: F401

    calls = count_calls(monkeypatch)
    res = CliRunner().invoke(cli, ["report", str(NAIVE), str(EPS), "--html",
                                   str(tmp_path / "r.html")])
    assert res.exit_code == 0, res.output
    assert not [c for c in calls if c[1].startswith("neurontrace.views")]
    from_cli = {c: n for c, n in calls.items() if c[1].startswith("neurontrace.cli")}
    assert from_cli == {("report", "neurontrace.cli.report"): 2,
                        ("extent", "neurontrace.cli.report"): 2,
                        ("compare_results", "neurontrace.cli.report"): 1}
    per = by_function(calls)
    for name in INNER:
        assert per[name] == 2, (name, calls)  # once per run, inside its one report
    assert per["compare"] == 0


def test_compare_computes_each_runs_analyses_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import neurontrace.cli.compare  # noqa: F401

    calls = count_calls(monkeypatch)
    res = CliRunner().invoke(cli, ["compare", str(NAIVE), str(RMS_NORM), str(EPS), "--json"])
    assert res.exit_code == 0, res.output
    per = by_function(calls)
    assert (per["measure"], per["report"], per["extent"], per["compare_results"]) == (3, 3, 3, 1)
    for name in INNER:
        assert per[name] == 3, (name, calls)
    assert per["compare"] == 0
    assert {r["metric"] for r in json.loads(res.stdout)["metrics"]} >= {"device_ns", "op:aten::mul"}


def test_compare_reads_from_the_report_what_each_analysis_gives() -> None:
    """The figures compare_results reads from a Report are those the analyses give."""
    runs = {"naive": analyses.events(NAIVE), "eps": analyses.events(EPS)}
    table = analyses.compare_results({n: analyses.measure(lf) for n, lf in runs.items()})
    got = {(m, r): v for m, r, v in table.select("metric", "run", "value").iter_rows()}
    for name, lf in runs.items():
        dev, tracks, moved = analyses.device_ops(lf), analyses.gaps(lf).tracks, analyses.copies(lf)
        expected = {
            "host_ns": analyses.host_ops(lf).get_column("self_ns").sum(),
            "device_ns": dev.get_column("self_ns").sum(),
            "launches": dev.get_column("calls").sum(),
            "device_busy_ns": tracks.get_column("busy_ns").sum(),
            "idle_ns": tracks.get_column("idle_ns").sum(),
            "copies": moved.height, "copy_bytes": moved.get_column("bytes").sum(),
            "tiny_copies": moved.get_column("tiny").sum(),
        }
        assert {m: got[(m, name)] for m in expected} == expected
        for op, ns in dev.select("name", "self_ns").iter_rows():
            assert got.get((f"op:{op}", name), ns) == ns
    assert got[("copies", "eps")] == 5 and got[("op:aten::mul", "naive")] == 236_606


def embedded(page: str) -> dict[str, Any]:
    m = re.search(r'<script id="NEURONTRACE" type="application/json">(.*?)</script>', page,
                  re.S)
    assert m
    return json.loads(m.group(1))  # type: ignore[no-any-return]


def test_the_terminal_and_the_page_show_the_same_figures(tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    res = CliRunner().invoke(cli, ["report", str(EPS), "--top", "3", "--html", str(out),
                                   "--json"])
    assert res.exit_code == 0, res.output
    said, page = json.loads(res.stdout), embedded(out.read_text())["runs"][0]
    for table in ("host_ops", "device_ops", "largest_gaps", "copies"):
        assert page[table][:3] == said[table], table  # the page shows 10, the terminal 3
    assert page["idle"] == said["idle"] and page["transfers"] == said["transfers"]
    assert len(page["device_ops"]) > 3 or len(page["device_ops"]) == len(said["device_ops"])


def test_report_top_cuts_the_one_report_as_a_smaller_top_would(tmp_path: Path) -> None:
    lf = analyses.events(EPS)
    from neurontrace.views.results import ALL, cut

    full = analyses.report(lf, top=ALL)
    for top in (1, 2, 5):
        small, cut_down = analyses.report(lf, top=top), cut(full, top)
        for table in ("host_ops", "device_ops", "copies", "idle", "tracks"):
            assert getattr(cut_down, table).equals(getattr(small, table)), (top, table)
        assert cut_down.largest_gaps.get_column("dur_ns").equals(
            small.largest_gaps.get_column("dur_ns"))
    assert full.largest_gaps.height == analyses.gaps(lf).gaps.height  # every gap


def test_the_export_draws_the_marks_it_is_given_and_computes_none(tmp_path: Path) -> None:
    lf = analyses.events(EPS)
    found, moved = analyses.gaps(lf).gaps, analyses.copies(lf)
    assert found.height and moved.height
    done = chrome.export(lf, tmp_path / "a.json", marks=chrome.Marks(found.head(2), moved))
    assert (done.gaps, done.copies) == (2, moved.height)
    none = chrome.export(lf, tmp_path / "b.json", marks=None)
    assert (none.gaps, none.copies) == (0, 0)
    marks = [e for e in json.loads((tmp_path / "a.json").read_text())["traceEvents"]
             if e.get("cat") == chrome.VIEW_CATEGORY]
    assert sum(e["args"][chrome.VIEW_KEY] == "gap" for e in marks) == 2


# -- the progress bar -------------------------------------------------------------------

class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def drawn(stream: io.StringIO, enabled: bool | None) -> str:
    bar = Bar("converting", enabled, file=stream)
    for done in (0, 25_000_000, 100_000_000):
        bar(done, 100_000_000)
    bar.close()
    return stream.getvalue()


def test_the_bar_is_drawn_on_a_terminal_and_nowhere_else_unless_asked() -> None:
    shown = drawn(Terminal(), None)
    assert "converting" in shown and "100%" in shown and "100/100 MB" in shown
    assert "25%" in shown and "\r" in shown  # redrawn in place
    assert drawn(io.StringIO(), None) == ""
    assert drawn(Terminal(), False) == ""
    forced = drawn(io.StringIO(), True)  # --progress: the bar itself, not just its label
    assert "100%" in forced and "[" in forced


def test_the_bar_draws_nothing_until_called_and_counts_without_a_total() -> None:
    stream = Terminal()
    Bar("reading", None, file=stream).close()
    assert stream.getvalue() == ""
    bar = Bar("exporting", None, unit="events", scale=1, file=stream)
    bar(1_234, None)
    bar.close()
    assert "exporting" in stream.getvalue() and "1,234 events" in stream.getvalue()


def test_convert_draws_the_bar_with_progress_and_not_without(tmp_path: Path) -> None:
    runner = CliRunner()
    quiet = runner.invoke(cli, ["convert", str(NAIVE), str(tmp_path / "a.parquet")])
    assert quiet.exit_code == 0, quiet.output
    assert "converting" not in quiet.stderr
    loud = runner.invoke(cli, ["convert", str(NAIVE), str(tmp_path / "b.parquet"),
                               "--progress"])
    assert loud.exit_code == 0, loud.output
    assert "converting" in loud.stderr and "%" in loud.stderr
    assert neurontrace.scan(tmp_path / "b.parquet").select(pl.len()).collect().item() > 0
