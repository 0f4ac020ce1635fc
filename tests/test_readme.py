"""Every example of README.md runs here, on the fixtures, and prints what the README says
(issue 14 "Docs and tests", issue 16 item 8).

- A shell block (```sh, ```bash, ```console) is run by bash in a fresh folder holding a
  ``fixtures`` link to the repository's fixtures, with the venv's ``neurontrace`` first on
  PATH; the plain ``` block that starts on the line after it is its expected stdout, where
  a line ``...`` matches any lines (none included).
- A ```python block is run statement by statement after :data:`PRELUDE`; the value of
  each expression statement is kept, and :data:`SNIPPET_CHECKS` compares them with the
  command line's ``--json`` on the same trace. The paths a snippet names are given here,
  explicitly (:data:`SUBSTITUTED`, :data:`CONVERTED`, :data:`WRITTEN`).
- Figures the prose quotes beside an example are parsed and checked against ``--json``.
- A block that cannot run here has ``<!-- not run: <reason> -->`` on the line before it;
  every other block runs, so a new example is tested unless the README says why not.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from neurontrace.cli.main import cli

from support import FIXTURES

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BIN = Path(sys.executable).parent
SHELL = ("sh", "bash", "console")
FENCE = re.compile(r"^```(\w*)\s*$")
NOT_RUN = re.compile(r"^<!-- not run: (.+) -->$")

#: What the README's first snippet imports and the later ones use without importing.
PRELUDE = "import neurontrace\nimport polars as pl\n"

CUDA = "fixtures/capture/cuda"
#: Path literals of the snippets replaced by a fixture's path.
SUBSTITUTED = {"trace.json": f"{CUDA}/naive/trace.json.gz"}
#: Path literals of the snippets (and files the prose's commands name) made, before the
#: snippet runs, by converting a fixture to that name; a snippet runs once per fixture
#: given (the Neuron join: on a run folder of two ranks, and on an Explorer capture whose
#: executions show on two cores with instructions inside).
CONVERTED = {
    "run/": ("fixtures/neuron/run_two_ranks", "fixtures/neuron/explorer_rmsnorm_vnc_0"),
    "run.parquet": (f"{CUDA}/naive/trace.json.gz",),
    "a.parquet": (f"{CUDA}/naive/trace.json.gz",),
    "b.parquet": (f"{CUDA}/rms_norm/trace.json.gz",),
    "naive.parquet": (f"{CUDA}/naive/trace.json.gz",),
    "rms_norm.parquet": (f"{CUDA}/rms_norm/trace.json.gz",),
    "compiled.parquet": (f"{CUDA}/compiled/trace.json.gz",),
}
#: Path literals of files the snippet writes itself.
WRITTEN = {"trace.parquet"}
#: The variant of a fixture folder the prose names (``fixtures/capture/cuda-eps-copy/``)
#: whose trace shows what the prose says.
EPS_COPIED = "fixtures/capture/cuda-eps-copy/eps_copied/trace.json.gz"
PATHLIKE = re.compile(r"(\.(json|gz|parquet)|/)$")


@dataclass(frozen=True)
class Block:
    """A fenced block of the README: ``line`` (1-based, of the opening fence), ``lang``,
    ``text``, ``not_run`` (the marker's reason) and ``output`` (the plain block right
    after it, when there is one)."""

    line: int
    lang: str
    text: str
    not_run: str | None
    output: str | None

    @property
    def id(self) -> str:
        return f"line{self.line}-{self.lang}"


def blocks(text: str) -> list[Block]:
    """The fenced blocks of ``text`` that hold commands or code, in order."""
    lines = text.splitlines()
    raw: list[tuple[int, int, str, str]] = []  # (open index, close index, lang, body)
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if m:
            j = next(k for k in range(i + 1, len(lines)) if lines[k].startswith("```"))
            raw.append((i, j, m.group(1), "\n".join(lines[i + 1:j])))
            i = j
        i += 1
    out = []
    for n, (start, end, lang, body) in enumerate(raw):
        if lang not in (*SHELL, "python"):
            continue
        marker = NOT_RUN.match(lines[start - 1]) if start else None
        nxt = raw[n + 1] if n + 1 < len(raw) else None
        output = nxt[3] if nxt and nxt[2] == "" and nxt[0] == end + 1 else None
        out.append(Block(start + 1, lang, body, marker.group(1) if marker else None, output))
    return out


BLOCKS = blocks(README.read_text())
RUN = [b for b in BLOCKS if b.not_run is None]


def matches(expected: list[str], actual: list[str]) -> bool:
    """``actual`` line for line, where an ``expected`` line ``...`` matches any lines."""
    if not expected:
        return not actual
    if expected[0] == "...":
        return any(matches(expected[1:], actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and expected[0] == actual[0] and matches(expected[1:], actual[1:])


def lines_of(text: str) -> list[str]:
    out = [line.rstrip() for line in text.splitlines()]
    while out and not out[-1]:
        out.pop()
    return out


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh folder where ``fixtures/...`` are the repository's fixtures."""
    (tmp_path / "fixtures").symlink_to(FIXTURES, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def sh(work: Path, command: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", command], cwd=work, env=env,
                          capture_output=True, text=True, timeout=300)


def cli_json(*args: str) -> Any:
    result = CliRunner().invoke(cli, [*args, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def convert(work: Path, name: str, variant: int = 0) -> None:
    if not (work / name).exists():
        done = sh(work, f"neurontrace convert {CONVERTED[name][variant]} {name}")
        assert done.returncode == 0, done.stderr


# -- shell blocks -------------------------------------------------------------------------


@pytest.mark.parametrize("block", [b for b in RUN if b.lang in SHELL], ids=lambda b: b.id)
def test_every_shell_example_prints_its_output(block: Block, work: Path) -> None:
    done = sh(work, block.text)
    assert done.returncode == 0, (block.text, done.stderr)
    if block.output is not None:
        assert matches(lines_of(block.output), lines_of(done.stdout)), (
            f"README.md line {block.line}: expected\n{block.output}\ngot\n{done.stdout}")


def test_the_output_match_fails_on_a_changed_figure_and_skips_only_at_dots() -> None:
    actual = ["naive  (5 steps)", "", "Device time", "  aten::mul: 85.2%", "  aten::mean: 11.6%"]
    assert matches(["naive  (5 steps)", "...", "  aten::mul: 85.2%", "..."], actual)
    assert not matches(["naive  (5 steps)", "...", "  aten::mul: 85.3%", "..."], actual)
    assert not matches(["naive  (5 steps)", "...", "  aten::mul: 85.2%"], actual)
    assert not matches(["Device time", "..."], actual)


# -- Python blocks ------------------------------------------------------------------------


def path_literals(block: Block) -> set[str]:
    return {node.value for node in ast.walk(ast.parse(block.text))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and PATHLIKE.search(node.value)}


def variants(block: Block) -> int:
    """How many times ``block`` runs: once per fixture :data:`CONVERTED` gives its paths."""
    return max([len(CONVERTED.get(name, ())) for name in path_literals(block)] + [1])


def run_python(block: Block, work: Path,
               variant: int = 0) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run ``block`` after :data:`PRELUDE` with its paths made as above (``variant``: which
    of the fixtures given); return its namespace and the value of each expression
    statement, by its source text."""
    code = block.text
    literals = path_literals(block)
    unknown = literals - set(SUBSTITUTED) - set(CONVERTED) - set(WRITTEN)
    assert not unknown, f"README.md line {block.line}: say in this test what {unknown} is"
    for name in sorted(literals & set(CONVERTED)):
        convert(work, name, min(variant, len(CONVERTED[name]) - 1))
    for name, path in SUBSTITUTED.items():
        code = code.replace(json.dumps(name), json.dumps(path))
    ns: dict[str, Any] = {}
    exec(PRELUDE, ns)  # noqa: S102
    values: dict[str, Any] = {}
    for stmt in ast.parse(code).body:
        if isinstance(stmt, ast.Expr):
            value = eval(compile(ast.Expression(stmt.value), "README.md", "eval"), ns)  # noqa: S307
            values[ast.unparse(stmt.value)] = value
        else:
            exec(compile(ast.Module([stmt], []), "README.md", "exec"), ns)  # noqa: S102
    return ns, values


def frame(value: Any) -> pl.DataFrame:
    return value.collect() if isinstance(value, pl.LazyFrame) else value


def by_name(rows: list[dict[str, Any]], *fields: str) -> dict[str, tuple[Any, ...]]:
    return {r["name"]: tuple(r[f] for f in fields) for r in rows}


def ms_to_ns(ms: float) -> int:
    ns = ms * 1e6
    assert math.isclose(ns, round(ns), abs_tol=1e-3), ms
    return round(ns)


def device_by_op(df: pl.DataFrame, op: str = "op") -> dict[str, int]:
    return {name if name is not None else "(unlinked)": ms_to_ns(ms)
            for name, ms in df.select(op, "device_ms").iter_rows()}


def check_library(work: Path, ns: dict[str, Any], values: dict[str, Any]) -> None:
    """Self time per operator is ``ops``'s; device work per op is ``ops --layer device``'s
    (issue 16 item 8: annotations drawn over kernels counted it four times too high)."""
    assert ns["table"].num_rows == ns["lf"].select(pl.len()).collect().item() > 0
    self_time, device = (v for v in values.values() if isinstance(v, pl.DataFrame))
    host = by_name(cli_json("ops", "--top", "0", "trace.parquet"), "calls", "self_ns")
    got = {name: (calls, ms_to_ns(ms)) for name, calls, ms in self_time.iter_rows()}
    assert got and got == {name: host[name] for name in got}
    dev = cli_json("ops", "--layer", "device", "--top", "0", "trace.parquet")
    assert device_by_op(device) == {r["name"]: r["self_ns"] for r in dev}


def check_neuron_join(work: Path, ns: dict[str, Any], values: dict[str, Any]) -> None:
    (device,) = (frame(v) for v in values.values())
    dev = cli_json("ops", "--layer", "device", "--top", "0", "run/")
    assert device.height and device_by_op(device) == {r["name"]: r["self_ns"] for r in dev}
    launches = dict(device.select("op", "launches").iter_rows())
    assert launches == {r["name"]: r["calls"] for r in dev}


def check_workload(work: Path, ns: dict[str, Any], values: dict[str, Any]) -> None:
    torch = pytest.importorskip("torch")
    variants = ns["workload"](torch.device("cpu"))
    assert len(variants) >= 2 and all(callable(f) for f in variants.values())


def check_analysis(work: Path, ns: dict[str, Any], values: dict[str, Any]) -> None:
    """The functions return what the commands print with --json."""
    host = frame(values["A.ops(lf)"])
    assert host.to_dicts() == cli_json("ops", "--top", "0", "run.parquet")
    device = frame(values["A.ops(lf, layer='device')"])
    assert device.to_dicts() == cli_json("ops", "--layer", "device", "--top", "0", "run.parquet")
    steps = frame(values["A.steps(lf)"])
    assert steps.height and steps.to_dicts() == cli_json("steps", "run.parquet")
    idle = cli_json("gaps", "run.parquet")
    assert frame(values["g.devices"]).to_dicts() == idle["devices"]
    assert frame(values["g.tracks"]).to_dicts() == idle["tracks"]
    assert frame(values["g.gaps"]).height == len(idle["gaps"])
    assert frame(values["A.copies(lf)"]).to_dicts() == cli_json("copies", "run.parquet")
    assert frame(values["A.kernels(lf)"]).to_dicts() == cli_json("kernels", "run.parquet")
    compared = frame(next(v for k, v in values.items() if k.startswith("A.compare(")))
    cli_rows = cli_json("compare", "a.parquet", "b.parquet")["metrics"]
    assert [(r["metric"], r["value"], r["ratio"]) for r in cli_rows] == list(
        compared.select("metric", "value", "ratio").iter_rows())


#: A check per Python snippet that has one, by a line of the snippet that names it.
SNIPPET_CHECKS: dict[str, Callable[[Path, dict[str, Any], dict[str, Any]], None]] = {
    'neurontrace.convert("trace.json", "trace.parquet")': check_library,
    'lf = neurontrace.scan("run/")': check_neuron_join,
    "def workload(device):": check_workload,
    "from neurontrace import analyses as A": check_analysis,
}


@pytest.mark.parametrize(("block", "variant"),
                         [pytest.param(b, v, id=f"{b.id}-{v}") for b in RUN
                          if b.lang == "python" for v in range(variants(b))])
def test_every_python_example_runs_and_gives_the_commands_figures(block: Block, variant: int,
                                                                  work: Path) -> None:
    checks = [check for key, check in SNIPPET_CHECKS.items() if key in block.text]
    ns, values = run_python(block, work, variant)
    for check in checks:
        check(work, ns, values)


def test_every_snippet_check_finds_its_snippet() -> None:
    for key in SNIPPET_CHECKS:
        assert sum(key in b.text for b in RUN if b.lang == "python") == 1, key


# -- figures in the prose -----------------------------------------------------------------


PROSE = " ".join(README.read_text().split())


def test_the_compare_figures_the_rmsnorm_section_quotes(work: Path) -> None:
    m = re.search(r"\(`(neurontrace compare [^`]+)`\): device time ([\d.]+) µs, ([\d.]+) µs "
                  r"\(([\d.]+)x\) and ([\d.]+) µs \(([\d.]+)x\); (\d+), (\d+) and (\d+) "
                  r"launches", PROSE)
    assert m, "the RMSNorm section's compare figures"
    command = m.group(1).split()
    for name in command[2:]:
        convert(work, name)
    rows = cli_json(*command[1:])["metrics"]
    device = [r for r in rows if r["metric"] == "device_ns"]
    launches = [r["value"] for r in rows if r["metric"] == "launches"]
    assert [f"{r['value'] / 1e3:.1f}" for r in device] == [m.group(k) for k in (2, 3, 5)]
    assert [f"{r['ratio']:.2f}" for r in device[1:]] == [m.group(4), m.group(6)]
    assert launches == [int(m.group(k)) for k in (7, 8, 9)]


def test_the_tiny_copy_the_rmsnorm_section_quotes() -> None:
    m = re.search(r"\(`(fixtures/capture/cuda-eps-copy/)`\), `neurontrace copies` finds one "
                  r"(\d+)-byte host-to-device copy a step, attributed to `([^`]+)` via "
                  r"`([^`]+)`, marked `tiny`", PROSE)
    assert m and EPS_COPIED.startswith(m.group(1))
    trace = str(FIXTURES.parent / EPS_COPIED)
    moved = cli_json("copies", trace)
    assert len(moved) == len(cli_json("steps", trace)) > 0
    assert {(r["bytes"], r["direction"], r["op"], r["via"], r["tiny"]) for r in moved} == {
        (int(m.group(2)), "h2d", m.group(3), m.group(4), True)}


def test_the_report_wording_the_report_section_quotes(work: Path) -> None:
    m = re.search(r'device time per op \("([^"]+?): ([\d.]+)% of device time, (\d+) launches '
                  r'per step"\)', PROSE)
    assert m
    convert(work, "naive.parquet")
    r = cli_json("report", "naive.parquet")
    top = r["device_ops"][0]
    assert (top["name"], f"{100 * top['share']:.1f}", top["calls"] // r["steps"]) == (
        m.group(1), m.group(2), int(m.group(3)))


def test_the_fusion_figures_the_advice_section_quotes(work: Path) -> None:
    """Issue 17: the advised saving of the naive RMSNorm's chain, and the saving the fused
    runs measure (device time per step, from compare), as the Advice section quotes
    them; each measured saving inside the range give or take a tenth of the chain."""
    m = re.search(r"`torch.rms_norm` saves ([\d.]+) µs a step and `torch.compile` ([\d.]+) "
                  r"µs, against the advised ([\d.]+) µs to ([\d.]+) µs, within a tenth of "
                  r"the chain's ([\d.]+) µs", PROSE)
    assert m, "the Advice section's fusion figures"
    for name in ("naive.parquet", "rms_norm.parquet", "compiled.parquet"):
        convert(work, name)
    (chain,) = [f for f in cli_json("advise", "naive.parquet") if f["rule"] == "fusion"]
    low, high = chain["at_stake_ns"]["low"], chain["at_stake_ns"]["high"]
    size = chain["evidence"]["chain_ns_per_step"]
    assert [f"{v / 1e3:.1f}" for v in (low, high, size)] == [m.group(k) for k in (3, 4, 5)]
    rows = cli_json("compare", "naive.parquet", "rms_norm.parquet", "compiled.parquet")["metrics"]
    per_step = [d["value"] / s["value"] for d, s in zip(
        [r for r in rows if r["metric"] == "device_ns"],
        [r for r in rows if r["metric"] == "steps"], strict=True)]
    saved = [per_step[0] - v for v in per_step[1:]]
    assert [f"{v / 1e3:.1f}" for v in saved] == [m.group(1), m.group(2)]
    assert all(low - size / 10 <= v <= high + size / 10 for v in saved)
    for name in ("rms_norm.parquet", "compiled.parquet"):
        assert not [f for f in cli_json("advise", name) if f["rule"] == "fusion"]


# -- blocks not run -----------------------------------------------------------------------


def test_the_refusal_and_the_note_the_merging_section_quotes(work: Path) -> None:
    """Issue 16 item 5: the variants of a capture are refused with the commands that
    analyse them apart; the ranks of one run are merged and said."""
    text = README.read_text()
    section = text[text.index("### Several traces: the ranks of one run, or refused"):]
    quoted = section.split("```\n", 2)[1].strip()
    done = sh(work, "neurontrace report fixtures/capture/cuda")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == quoted
    fix = quoted.rsplit("side by side (", 1)[1].rstrip(")")
    assert sh(work, fix).returncode == 0  # the command it names works
    said = re.search(r"`(neurontrace: run: 2 traces\s+merged as the ranks of one run "
                     r"\(ranks 0, 1\)): \.\.\.`", section)
    assert said is not None
    convert(work, "run/")
    done = sh(work, "neurontrace ops run/")
    assert done.returncode == 0
    assert " ".join(said.group(1).split()) + ":" in done.stderr


def test_the_filters_section_lists_every_analysis_options_and_its_figures() -> None:
    """Issue 18: the options the "Filters and output" section lists are those of every
    analysis command's help (advise: the filters), and the figures its prose quotes
    (the first step's start from the trace's start, its wall time) are the commands'."""
    from neurontrace import analyses

    text = README.read_text()
    section = text[text.index("### Filters and output"):text.index("### Several traces")]
    listed = re.findall(r"^\| `(--[a-z]+)", section, re.M)
    assert listed == ["--step", "--rank", "--window", "--sort", "--csv"]
    for command in ("ops", "kernels", "gaps", "copies", "steps", "launches", "ranks",
                    "advise", "compare", "report"):
        shown = CliRunner().invoke(cli, [command, "--help"]).output
        wanted = listed[:3] if command in ("advise", "compare", "report") else listed
        assert all(option in shown for option in wanted), command
    naive = str(ROOT / CUDA / "naive/trace.json.gz")
    first = analyses.events(naive).select(pl.col("start_ns").min()).collect().item()
    step = cli_json("steps", naive)[0]
    assert f"(at {(step['start_ns'] - first) / 1000:.1f} µs)" in section
    assert f"kept whole ({step['wall_ns'] / 1000:.1f} µs)" in section


def test_each_block_not_run_says_why_and_nothing_else_is_skipped() -> None:
    text = README.read_text()
    markers = [m.group(1) for line in text.splitlines() if (m := NOT_RUN.match(line))]
    skipped = [b.not_run for b in BLOCKS if b.not_run is not None]
    assert markers == skipped, "a not-run marker must be right before a command block"
    assert all(len(reason.split()) >= 3 for reason in skipped)
    assert len(RUN) >= 5 and {b.lang for b in RUN} >= {"sh", "python"}
