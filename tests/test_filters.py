"""Filters (--step, --rank, --window), --sort and --csv on the analysis commands, and
their tables at 80 columns (issue 18), through the command line.

The filtered figures are checked against a standard-library computation from the raw
Kineto JSON of a corpus trace (``NEURONTRACE_CORPUS``): a device row's step is that of
the op that launched it (the ``cpu_op`` with the kernel's ``External id``; the
``ProfilerStep#N`` span its start falls in), its time in a window that op's start from
the trace's first event.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import re
from collections import defaultdict
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner, Result

from neurontrace.analyses import filters
from neurontrace.cli.main import cli

from support import FIXTURES

NAIVE = FIXTURES / "capture/cuda/naive/trace.json.gz"
EPS = FIXTURES / "capture/cuda-eps-copy/eps_copied/trace.json.gz"
TWO_RANKS = FIXTURES / "neuron/run_two_ranks"
DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
#: Each table command and the keys of its --json objects (gaps: its device gaps).
TABLES = {
    "ops": ("name", "calls", "self_ns", "total_ns", "share"),
    "kernels": ("name", "calls", "total_ns", "mean_ns", "min_ns", "max_ns", "share"),
    "copies": ("rank", "start_ns", "dur_ns", "bytes", "direction", "op", "via", "tiny",
               "layers"),
    "steps": ("step", "rank", "start_ns", "wall_ns", "busy_ns", "idle_ns", "h2d_copy_ns",
              "sync_ns", "launch_latency_ns", "host_dispatch_ns", "unknown_ns",
              "host_only_ns", "launches"),
    "gaps": ("rank", "device", "label", "start_ns", "dur_ns", "cause", "before", "after"),
}


def run(*args: object, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args], env=env)


def ok_json(*args: object) -> Any:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def refused(*args: object) -> str:
    """The one line a usage error or bad input prints (exit 2)."""
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().count("\n") == 0, result.stderr
    return result.stderr.strip()


# -- the spellings --------------------------------------------------------------------


def test_window_spellings_with_units_are_read_exactly() -> None:
    assert filters.window("1.5ms:3ms") == (1_500_000, 3_000_000)
    assert filters.window("200us:") == (200_000, None)
    assert filters.window(":2s") == (None, 2_000_000_000)
    assert filters.window("0:1.25µs") == (0, 1_250)
    assert filters.window("0.1ns:7ns") == (0, 7)  # fractions of a nanosecond dropped
    assert filters.steps("5,2,2") == (2, 5)


@pytest.mark.parametrize("spelling", ["5", "1.5:3ms", "1ms:2", "1ms", "3ms:1ms", ":",
                                      "1 parsec:2ms", "-1ms:2ms"])
def test_a_window_without_units_or_in_the_wrong_order_is_refused(spelling: str) -> None:
    line = refused("kernels", NAIVE, "--window", spelling)
    assert "--window" in line


def test_a_bare_number_is_refused_as_ambiguous_naming_the_units() -> None:
    assert "has no unit (ns, us, ms or s" in refused("ops", NAIVE, "--window", "100:200us")


def test_a_step_or_rank_the_trace_lacks_is_refused_naming_those_it_has() -> None:
    assert refused("steps", NAIVE, "--step", "2,9").endswith("no step 9 (steps: 1-5)")
    assert refused("advise", NAIVE, "--rank", "3").endswith("no rank 3 (ranks: 0)")
    assert "is not a step number" in refused("ops", NAIVE, "--step", "two")


# -- what is kept --------------------------------------------------------------------


def frame(rows: list[tuple[int, int, int | None, int | None, int]]) -> pl.LazyFrame:
    """rows of (row, start_ns, framework_row, step, rank)."""
    return pl.LazyFrame(rows, schema={"row": pl.Int64, "start_ns": pl.Int64,
                                      "framework_row": pl.Int64, "step": pl.Int64,
                                      "rank": pl.Int64}, orient="row")


def kept(lf: pl.LazyFrame, f: filters.Filter) -> list[int]:
    return sorted(filters.keep(lf, f).collect().get_column("row").to_list())


def test_window_keeps_rows_by_their_start_and_device_work_by_its_launching_op() -> None:
    lf = frame([
        (0, 1_000, None, None, 0),  # the trace's start
        (1, 1_900, None, 1, 0),     # op starting before the window (at 900)...
        (2, 2_100, 1, 1, 0),        # ...its kernel inside: goes with the op, dropped
        (3, 2_500, None, 1, 0),     # op starting inside (1500), ending anywhere
        (4, 9_000, 3, 1, 0),        # ...its kernel far after: kept with it
        (5, 3_000, None, 2, 0),     # op at 2000: END is excluded
        (6, 1_000_000, None, 2, 1),  # rank 1's trace starts here: 0 from its start
        (7, 1_001_500, None, 2, 1),  # 1500 from rank 1's start: kept
    ])
    assert kept(lf, filters.Filter(window=(1_000, 2_000))) == [3, 4, 7]
    assert kept(lf, filters.Filter(window=(None, 1_000))) == [0, 1, 2, 6]
    assert kept(lf, filters.Filter(window=(2_000, None))) == [5]


def test_steps_and_rank_keep_the_rows_of_those_steps_of_that_rank() -> None:
    lf = frame([(0, 0, None, None, 0), (1, 5, None, 1, 0), (2, 6, 1, 1, 0),
                (3, 9, None, 2, 0), (4, 9, None, 2, 1)])
    assert kept(lf, filters.Filter(steps=(1,))) == [1, 2]
    assert kept(lf, filters.Filter(steps=(1, 2), rank=0)) == [1, 2, 3]
    assert kept(lf, filters.Filter(rank=1)) == [4]
    assert kept(lf, filters.Filter()) == [0, 1, 2, 3, 4]


# -- against the raw JSON of a corpus trace ---------------------------------------------


def raw_events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path) as f:
        doc = json.load(f)
    return list(doc["traceEvents"] if isinstance(doc, dict) else doc)


def ns(us: Any) -> int:
    """Kineto's microseconds (decimal text as JSON gives it) as exact nanoseconds."""
    return int(Decimal(str(us)) * 1000)


def device_work(events: list[dict[str, Any]]) -> list[tuple[str, int, int | None]]:
    """(name, dur_ns, the launching cpu_op's start in ns or None) of each device row."""
    ops: dict[int, int] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "cpu_op" and "External id" in e.get(
                "args", {}):
            ops.setdefault(e["args"]["External id"], ns(e["ts"]))
    return [(e["name"], ns(e["dur"]), ops.get(e.get("args", {}).get("External id", -1)))
            for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATS]


def profiler_steps(events: list[dict[str, Any]]) -> dict[int, tuple[int, int]]:
    """N -> (start, end) ns of each host ProfilerStep#N."""
    return {int(e["name"].split("#")[1]): (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]))
            for e in events if e.get("ph") == "X" and e.get("cat") != "gpu_user_annotation"
            and re.fullmatch(r"ProfilerStep#\d+", str(e.get("name")))}


def per_name(work: list[tuple[str, int]]) -> dict[str, tuple[int, int]]:
    """name -> (calls, total ns)."""
    calls: dict[str, int] = defaultdict(int)
    total: dict[str, int] = defaultdict(int)
    for name, dur in work:
        calls[name] += 1
        total[name] += dur
    return {n: (calls[n], total[n]) for n in calls}


@pytest.fixture(scope="module")
def nccl(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """The corpus trace with steps and kernels, converted once, and its raw events."""
    import os

    corpus = os.environ.get("NEURONTRACE_CORPUS")
    if not corpus:
        pytest.skip("NEURONTRACE_CORPUS is not set to a folder of real Kineto traces")
    raw = Path(corpus) / "nccl_parser_config.json.gz"
    out = tmp_path_factory.mktemp("filters") / "nccl.parquet"
    done = run("convert", raw, out)
    assert done.exit_code == 0, done.output
    return out, raw_events(raw)


def test_kernel_time_of_a_step_is_the_work_its_ops_launched(
        nccl: tuple[Path, list[dict[str, Any]]]) -> None:
    path, events = nccl
    steps = profiler_steps(events)
    assert len(steps) >= 3
    work = device_work(events)

    def expected(chosen: set[int]) -> dict[str, tuple[int, int]]:
        return per_name([(name, dur) for name, dur, op in work if op is not None and any(
            a <= op < b for n, (a, b) in steps.items() if n in chosen)])

    for chosen in ({sorted(steps)[1]}, set(sorted(steps)[:2])):
        got = ok_json("kernels", path, "--step", ",".join(map(str, sorted(chosen))))
        want = expected(chosen)
        assert want and sum(c for c, _ in want.values()) > 100
        assert {k["name"]: (k["calls"], k["total_ns"]) for k in got} == want


def test_kernels_in_a_window_are_those_launched_by_ops_starting_in_it(
        nccl: tuple[Path, list[dict[str, Any]]]) -> None:
    path, events = nccl
    first = min(ns(e["ts"]) for e in events if e.get("ph") in ("X", "i", "I", "C"))
    last = max(ns(e["ts"]) + ns(e.get("dur", 0)) for e in events if e.get("ph") == "X")
    a, b = (first + (last - first) * k // 10 for k in (3, 6))
    a_us, b_us = (a - first) // 1000, (b - first) // 1000
    got = ok_json("kernels", path, "--window", f"{a_us}us:{b_us / 1000}ms")
    want = per_name([(name, dur) for name, dur, op in device_work(events)
                     if op is not None and a_us * 1000 <= op - first < b_us * 1000])
    assert want and sum(c for c, _ in want.values()) > 100
    assert {k["name"]: (k["calls"], k["total_ns"]) for k in got} == want


def key_averages_calls(spans: list[dict[str, Any]]) -> dict[str, int]:
    """Calls per cpu_op name among host ``spans``, by torch's rule: spans nest per thread
    (sorted by start, longer first; a child lies within its parent), and a span whose
    only child has its own name is one call with it (``_remove_dup_nodes``)."""
    children: dict[int, list[int]] = defaultdict(list)
    threads: dict[tuple[Any, Any], list[int]] = defaultdict(list)
    for i, e in enumerate(spans):
        threads[(e["pid"], e["tid"])].append(i)
    for rows in threads.values():
        rows.sort(key=lambda i: (ns(spans[i]["ts"]), -ns(spans[i]["dur"])))
        stack: list[int] = []
        for i in rows:
            start = ns(spans[i]["ts"])
            end = start + ns(spans[i]["dur"])
            while stack and not (ns(spans[stack[-1]]["ts"]) + ns(spans[stack[-1]]["dur"])
                                 >= end):
                stack.pop()
            if stack:
                children[stack[-1]].append(i)
            stack.append(i)
    merged = {kids[0] for p, kids in children.items()
              if len(kids) == 1 and spans[kids[0]]["name"] == spans[p]["name"]}
    calls: dict[str, int] = defaultdict(int)
    for i, e in enumerate(spans):
        if e.get("cat") == "cpu_op" and i not in merged:
            calls[e["name"]] += 1
    return dict(calls)


def test_ops_in_a_window_count_the_cpu_ops_starting_in_it(
        nccl: tuple[Path, list[dict[str, Any]]]) -> None:
    path, events = nccl
    first = min(ns(e["ts"]) for e in events if e.get("ph") in ("X", "i", "I", "C"))
    host = [e for e in events if e.get("ph") == "X"
            and e.get("cat") not in (*DEVICE_CATS, "gpu_user_annotation")]
    starts = sorted(ns(e["ts"]) - first for e in host if e.get("cat") == "cpu_op")
    lo, hi = (starts[len(starts) * k // 10] // 1000 for k in (4, 6))  # whole microseconds
    calls = key_averages_calls([e for e in host if lo * 1000 <= ns(e["ts"]) - first
                                < hi * 1000])
    got = {o["name"]: o["calls"] for o in ok_json("ops", path, "--window", f"{lo}us:{hi}us")}
    assert sum(calls.values()) > 100
    assert {n: got.get(n) for n in calls} == calls


def test_ranks_of_a_run_add_up_to_the_whole(tmp_path: Path) -> None:
    parts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for rank in (0, 1):
        for k in ok_json("kernels", TWO_RANKS, "--rank", rank):
            parts[k["name"]][0] += k["calls"]
            parts[k["name"]][1] += k["total_ns"]
    whole = {k["name"]: (k["calls"], k["total_ns"]) for k in ok_json("kernels", TWO_RANKS)}
    assert whole and {n: tuple(v) for n, v in parts.items()} == whole
    one = ok_json("kernels", TWO_RANKS, "--rank", 1)
    assert sum(k["calls"] for k in one) < sum(c for c, _ in whole.values())


def test_report_with_a_step_gives_the_figures_of_ops_and_gaps_with_that_step() -> None:
    doc = ok_json("report", NAIVE, "--step", 2)
    whole = ok_json("report", NAIVE)
    assert doc["steps"] == 1 < whole["steps"]
    assert doc["host_ops"] == ok_json("ops", NAIVE, "--step", 2) != whole["host_ops"]
    assert doc["device_ops"] == ok_json("ops", NAIVE, "--layer", "device", "--step", 2)
    gaps = ok_json("gaps", NAIVE, "--step", 2)
    assert doc["devices"] == gaps["devices"] != whole["devices"]
    assert doc["tracks"] == gaps["tracks"]
    assert doc["largest_gaps"][0]["dur_ns"] == max(g["dur_ns"] for g in gaps["device_gaps"])
    assert [(f["rule"], f["at_stake_ns"]) for f in doc["findings"]] == [
        (f["rule"], f["at_stake_ns"]) for f in ok_json("advise", NAIVE, "--step", 2)]


def test_report_of_a_rank_and_a_window_narrows_like_the_other_analyses() -> None:
    one = ok_json("report", TWO_RANKS, "--rank", 1)
    assert one["device_ops"] == ok_json("ops", TWO_RANKS, "--layer", "device", "--rank", 1)
    assert {d["rank"] for d in one["devices"]} == {1}
    window = ("--window", "200us:400us")
    assert ok_json("report", NAIVE, *window)["host_ops"] == ok_json("ops", NAIVE, *window)


def test_report_of_a_step_a_run_lacks_is_refused_in_one_line() -> None:
    assert refused("report", NAIVE, "--step", "2,9").endswith("no step 9 (steps: 1-5)")
    line = refused("report", NAIVE, TWO_RANKS, "--rank", "1")
    assert line.startswith(f"neurontrace: error: {NAIVE}: no rank 1"), line


# -- --sort and --csv --------------------------------------------------------------------


def test_sort_orders_numbers_largest_first_and_names_a_to_z() -> None:
    calls = [o["calls"] for o in ok_json("ops", NAIVE, "--sort", "calls")]
    assert calls == sorted(calls, reverse=True) and calls != [
        o["calls"] for o in ok_json("ops", NAIVE)]
    names = [o["name"] for o in ok_json("ops", NAIVE, "--sort", "name")]
    assert names == sorted(names)
    walls = [s["wall_ns"] for s in ok_json("steps", NAIVE, "--sort", "wall", "--top", "2")]
    assert walls == sorted((s["wall_ns"] for s in ok_json("steps", NAIVE)), reverse=True)[:2]
    table = run("kernels", NAIVE, "--sort", "min", "--top", "2")
    assert table.exit_code == 0 and len(table.stdout.splitlines()) == 4  # head, 2, "more"


def test_an_unknown_sort_column_is_refused_naming_the_columns() -> None:
    for command, columns in TABLES.items():
        line = refused(command, NAIVE, "--sort", "bogus")
        assert f"({', '.join(columns)})" in line, line


@pytest.mark.parametrize("command", sorted(TABLES))
def test_csv_has_the_json_columns_and_every_row_unless_top(command: str) -> None:
    path = EPS if command == "copies" else NAIVE
    doc = ok_json(command, path)
    rows = doc["device_gaps"] if command == "gaps" else doc
    got = list(csv.reader(io.StringIO(run(command, path, "--csv").stdout)))
    assert tuple(got[0]) == TABLES[command] == tuple(rows[0])
    assert len(got) - 1 == len(rows) > 2
    as_text = [["" if v is None else ",".join(v) if isinstance(v, list)
                else str(v).lower() if isinstance(v, bool) else str(v) for v in r.values()]
               for r in rows]
    assert got[1:] == as_text  # the order of --json (gaps: the device gaps, in time order)
    top = list(csv.reader(io.StringIO(run(command, path, "--csv", "--top", "2").stdout)))
    assert len(top) == 3
    if command == "gaps":  # the two longest, as the table lists them
        durations = sorted((g["dur_ns"] for g in rows), reverse=True)
        assert [int(r[4]) for r in top[1:]] == durations[:2]


@pytest.mark.parametrize("command", [*TABLES, "launches", "ranks"])
def test_json_and_csv_together_are_refused_before_the_trace_is_read(command: str,
                                                                     tmp_path: Path) -> None:
    assert "--json and --csv" in refused(command, NAIVE, "--json", "--csv")
    # refused before anything is read: a missing trace is not even looked at
    assert "--json and --csv" in refused(command, tmp_path / "missing.json", "--csv", "--json")


# -- 80 columns ----------------------------------------------------------------------


@pytest.mark.parametrize("args", [("ops",), ("ops", "--layer", "device"), ("kernels",),
                                  ("gaps",), ("copies",), ("steps",), ("report",),
                                  ("advise",)], ids=" ".join)
def test_every_analysis_fits_80_columns(args: tuple[str, ...]) -> None:
    for path in (NAIVE, EPS):
        result = run(*args, path, env={"COLUMNS": "80"})
        assert result.exit_code == 0, result.output
        lines = result.stdout.splitlines()
        assert len(lines) > 1 and max(map(len, lines)) <= 80, result.stdout


def test_a_table_too_wide_says_which_detail_columns_it_left_out() -> None:
    narrow = run("steps", NAIVE, env={"COLUMNS": "80"}).stdout.splitlines()
    wide = run("steps", NAIVE, env={"COLUMNS": "200"}).stdout.splitlines()
    assert "launch latency" in wide[0] and "launch latency" not in narrow[0]
    assert narrow[-1].startswith("(not shown at 80 columns: ") and "launch latency" in \
        narrow[-1]
    assert len(wide) == len(narrow) - 1 and max(map(len, wide)) > 80
