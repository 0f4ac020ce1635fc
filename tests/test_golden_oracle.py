"""The goldens of ``test_golden.py`` checked against an independent oracle.

``test_golden.py`` pins each fixture's table to a reviewed text: it proves only that
nothing changed. Here the same tables (and those of the real CUDA captures and of the
corpus, where ``NEURONTRACE_CORPUS`` is set) are recomputed from the raw JSON with the
standard library alone (``json`` with exact decimals), by the rules the schema and torch state:

- one row per complete (``X``), instant (``i``/``I``) and counter (``C``) event;
- ``start_ns`` = ``baseTimeNanoseconds`` (when the header has it) + ``ts`` x 1000 and
  ``dur_ns`` = ``dur`` x 1000, exactly, truncated to whole ns; a negative or missing
  ``dur`` is 0;
- ``parent``/``depth``/``self_ns`` by torch's own rule (``EventList._populate_cpu_children``,
  torch 2.13, restated below) per (pid, tid);
- ``framework_row``: a device row's launch is the runtime row with its ``correlation``,
  and its framework op is the launch's nearest framework ancestor;
- ``step``: N of the ``ProfilerStep#N`` span the row starts in; device work takes the step
  of the op that launched it.

Every golden text equals the rendering of the table checked here (``test_golden.py``),
so a golden that passes both says what the raw trace says.
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import re
from decimal import ROUND_DOWN, Decimal
from pathlib import Path
from typing import Any

import pytest

import neurontrace

from support import FIXTURES, KINETO

#: Fixtures the standard library cannot read as the reader does: ``bare-na`` has bare
#: ``N/A`` words (our reader repairs them to text, warned), the rest are refused inputs.
NOT_STDLIB = {"bare-na.json", "truncated.json", "not-a-trace.json"}
GOLDEN = sorted(p.name for p in KINETO.iterdir()
                if p.name.endswith((".json", ".json.gz")) and p.name not in NOT_STDLIB)
CORPUS = os.environ.get("NEURONTRACE_CORPUS")
TRACES = {**{name: KINETO / name for name in GOLDEN},
          **{f"capture-cuda-{p.parent.name}": p
             for p in sorted((FIXTURES / "capture" / "cuda").glob("*/trace.json.gz"))},
          **({f"corpus-{p.name}": p for p in sorted(Path(CORPUS).glob("*.json*"))}
             if CORPUS else {})}
CASES = sorted(TRACES)
KINDS = {"X": "span", "i": "instant", "I": "instant", "C": "counter"}
STEP = re.compile(r"ProfilerStep#(\d+)$")
RUNTIME = re.compile(r"_(runtime|driver)$")


def raw_events(path: Path) -> tuple[int, list[dict[str, Any]]]:
    """The header's base time (0 without one) and the events that become rows."""
    data = (gzip.open(path) if path.suffix == ".gz" else path.open("rb")).read()
    # Invalid UTF-8 becomes U+FFFD, as the reader documents; control characters inside
    # strings are kept (strict=False).
    doc = json.loads(data.decode("utf-8", "replace"), parse_float=Decimal, strict=False)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    base = doc.get("baseTimeNanoseconds", 0) if isinstance(doc, dict) else 0
    return int(base), [e for e in events if e.get("ph") in KINDS]


def ns(us: Any) -> int:
    return int((Decimal(us) * 1000).to_integral_value(ROUND_DOWN))


def expected(base: int, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One dict per event: the oracle's columns."""
    rows = []
    for e in events:
        dur = ns(e["dur"]) if e.get("ph") == "X" and "dur" in e else 0
        rows.append({
            "name": e.get("name"), "category": e.get("cat"), "kind": KINDS[e["ph"]],
            "start_ns": base + ns(e["ts"]), "dur_ns": max(dur, 0),
            "pid": e.get("pid"), "tid": e.get("tid"),
            "correlation": (e.get("args") or {}).get("correlation"),
            "external_id": (e.get("args") or {}).get("External id"),
        })
    return rows


def torch_nesting(rows: list[dict[str, Any]], spans: list[int]) -> dict[int, int | None]:
    """Parent of each span, as ``EventList._populate_cpu_children`` decides: per thread,
    sorted by (start, -end), a stack of open parents; the top is popped while the event
    starts at or after its end or ends after it."""
    parent: dict[int, int | None] = {}
    by_thread: dict[tuple[Any, Any], list[int]] = {}
    for i in spans:
        by_thread.setdefault((rows[i]["pid"], rows[i]["tid"]), []).append(i)
    for members in by_thread.values():
        members.sort(key=lambda i: (rows[i]["start_ns"], -end(rows[i])))
        stack: list[int] = []
        for i in members:
            parent[i] = None
            while stack:
                top = rows[stack[-1]]
                if rows[i]["start_ns"] >= end(top) or end(rows[i]) > end(top):
                    stack.pop()
                else:
                    parent[i] = stack[-1]
                    break
            stack.append(i)
    return parent


def end(row: dict[str, Any]) -> int:
    return int(row["start_ns"] + row["dur_ns"])


def ours(name: str) -> list[dict[str, Any]]:
    return neurontrace.load(TRACES[name]).to_pylist()


@functools.cache  # each trace is read and converted once for the four tests
def matched(name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[int]]:
    """The oracle's rows, ours, and for each of ours the oracle row it is (by the event's
    identity: name, kind, start, pid, tid; duplicates taken in file order)."""
    want = expected(*raw_events(TRACES[name]))
    got = ours(name)
    assert len(got) == len(want), name
    free: dict[tuple[Any, ...], list[int]] = {}
    for i, w in enumerate(want):
        free.setdefault(identity(w), []).append(i)
    at = []
    for g in got:
        key = identity(g)
        assert free.get(key), f"{name}: no raw event for row {g['row']} {key}"
        at.append(free[key].pop(0))
    return want, got, at


def identity(r: dict[str, Any]) -> tuple[Any, ...]:
    pid, tid = (r["pid"], r["tid"])
    return (r["name"], r["kind"], r["start_ns"],
            pid if isinstance(pid, int) else None, tid if isinstance(tid, int) else None)


@pytest.mark.parametrize("name", CASES)
def test_rows_times_and_categories_are_the_raw_events(name: str) -> None:
    want, got, at = matched(name)
    for g, i in zip(got, at, strict=True):
        w = want[i]
        assert (g["dur_ns"], g["category"]) == (w["dur_ns"], w["category"]), (name, g["row"])


@pytest.mark.parametrize("name", CASES)
def test_parent_depth_and_self_time_follow_torch(name: str) -> None:
    want, got, at = matched(name)
    ours_at = {i: g["row"] for g, i in zip(got, at, strict=True)}
    host = [i for g, i in zip(got, at, strict=True)
            if g["kind"] == "span" and g["layer"] in ("framework", "runtime")]
    parent = torch_nesting(want, host)
    children: dict[int, list[int]] = {}
    for i, p in parent.items():
        if p is not None:
            children.setdefault(p, []).append(i)
    for g, i in zip(got, at, strict=True):
        if i not in parent:
            continue
        p = parent[i]
        assert g["parent"] == (ours_at[p] if p is not None else None), (name, g["row"])
        depth, q = 0, p
        while q is not None:
            depth, q = depth + 1, parent[q]
        assert g["depth"] == depth, (name, g["row"])
        covered = sum(want[c]["dur_ns"] for c in children.get(i, []))
        assert g["self_ns"] == max(want[i]["dur_ns"] - covered, 0), (name, g["row"])


@pytest.mark.parametrize("name", CASES)
def test_device_rows_link_to_the_op_that_launched_them(name: str) -> None:
    """A device event's launch is the runtime call with its ``correlation``. Its op is
    the framework op named by the launch's ``External id`` (Kineto's id of the op on top
    of the profiler's op stack) when that op encloses the launch; else the launch's
    nearest enclosing framework op (older traces number ids apart from ops). A device
    row without a launch (a GPU-side annotation) takes the framework row with its own
    ``External id``."""
    want, got, at = matched(name)
    by_row = {g["row"]: g for g in got}
    ours_at = {i: g["row"] for g, i in zip(got, at, strict=True)}
    framework: dict[Any, list[int]] = {}
    for g, i in zip(got, at, strict=True):
        if g["layer"] == "framework" and want[i]["external_id"] is not None:
            framework.setdefault(want[i]["external_id"], []).append(g["row"])
    launches = {w["correlation"]: ours_at[j] for j, w in enumerate(want)
                if RUNTIME.search(w["category"] or "") and w["correlation"] is not None}

    def enclosing(row: int) -> list[int]:
        chain, op = [], by_row[row]["parent"]
        while op is not None:
            chain.append(op)
            op = by_row[op]["parent"]
        return [r for r in chain if by_row[r]["layer"] == "framework"]

    for g, i in zip(got, at, strict=True):
        if g["layer"] != "device":
            continue
        launch = launches.get(want[i]["correlation"])
        named = framework.get(want[i]["external_id"], [])
        if launch is None:
            op = named[0] if named else None
        else:
            ops = enclosing(launch)
            op = next((r for r in ops if r in named), ops[0] if ops else None)
        assert g["framework_row"] == op, (name, g["row"])


@pytest.mark.parametrize("name", CASES)
def test_step_is_the_profiler_step_the_row_starts_in(name: str) -> None:
    want, got, at = matched(name)
    steps = [(w["start_ns"], end(w), int(m.group(1))) for w in want
             if w["kind"] == "span" and (m := STEP.match(w["name"] or ""))]
    by_row = {g["row"]: g for g in got}

    def step_at(t: int) -> int | None:
        inside = [n for s, e, n in steps if s <= t < e]
        return inside[0] if inside else None

    for g, i in zip(got, at, strict=True):
        launcher = g["framework_row"] if g["layer"] == "device" else None
        t = by_row[launcher]["start_ns"] if launcher is not None else want[i]["start_ns"]
        assert g["step"] == step_at(t), (name, g["row"])


def test_the_oracle_reads_every_golden_fixture_but_one() -> None:
    """Only the bare-word fixture is beyond the standard library (it is repaired)."""
    goldens = {p.name.removesuffix(".txt") for p in (KINETO.parents[1] / "tests" /
                                                      "golden").glob("*.txt")}
    assert goldens - set(GOLDEN) == {"bare-na.json"}
