"""Idle time by cause, split instant by instant, and launches per step: checked on every
corpus trace against a computation from the raw JSON with the standard library only.

The oracle's definitions, from what Kineto writes (``docs/formats.md``):

- device **work**: complete (``X``) events of category ``kernel``, ``gpu_memcpy``,
  ``gpu_memset``, and MTIA's ``mtia_ccp_events`` except ``event_wait``; its device is
  ``args.device``, else its ``pid``; zero-length work occupies no time;
- **runtime calls**: ``X`` events of the runtime and driver categories (``cuda_runtime``,
  ``cuda_driver``, ``mtia_runtime``, ``privateuse1_*``, ``xpu_*``);
- a work's **launch**: the earliest runtime call with its ``args.correlation``;
- **host-to-device copies**: runtime calls named ``*memcpy*`` whose name says host to
  device (``HtoD``, ``H2D``, ...) or whose ``args.kind`` is 1 (``cudaMemcpyHostToDevice``),
  ``gpu_memcpy`` events named ``Memcpy HtoD ...``, MTIA ``dma_request`` events with
  ``args.direction`` ``HOST_TO_DEVICE``;
- **synchronisations**: runtime calls named ``*Synchronize*``, ``*WaitEvent*``,
  ``waitOnEvent``; device ``cuda_sync`` events and MTIA ``event_wait``;
- **framework ops**: ``cpu_op`` events.

Each instant of a gap (no work on any stream of the device) is charged to the first of:
a copy in progress, a synchronisation in progress, the next work's launch already begun,
a framework op running, else unknown. Each trace is one rank: every explanation on it
counts for each of its devices. Launches per step: device work whose launch call starts
within the ``ProfilerStep#N`` span (the step of the op around the call); work without a
launch call in the trace (launched before the profiler started) is in no step.
Skipped, saying why, without NEURONTRACE_CORPUS.
"""

from __future__ import annotations

import bisect
import gzip
import json
import os
import re
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from neurontrace.analyses import events, steps
from neurontrace.cli.main import cli

CORPUS = os.environ.get("NEURONTRACE_CORPUS")
NAMES = sorted(p.name for p in Path(CORPUS).glob("*.json.gz")) if CORPUS else []

CAUSES = ("h2d_copy", "sync", "launch_latency", "host_dispatch", "unknown")
WORK_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
MTIA_CATEGORY, MTIA_WAIT = "mtia_ccp_events", "event_wait"
RUNTIME = re.compile(r"^(cuda_runtime|cuda_driver|mtia_runtime|privateuse1_\w+|xpu_\w+)$")
H2D_NAME = re.compile(r"(?i)htod|h2d|hosttodevice|host_to_device")
OTHER_DIRECTION = re.compile(r"(?i)dtoh|d2h|devicetohost|device_to_host|ptop|p2p|peer|dtod|"
                             r"d2d|devicetodevice|device_to_device")
SYNC_NAME = re.compile(r"(?i)synchroniz|waitevent|waitonevent")
STEP = re.compile(r"^ProfilerStep#(\d+)$")

Interval = tuple[int, int]


def ns(v: Any) -> int:
    """Microseconds (int or decimal text) to whole nanoseconds, exactly."""
    return int(Decimal(v) * 1000)


def merged(spans: list[Interval]) -> list[Interval]:
    """The union of ``spans``: disjoint, sorted (touching spans merge)."""
    out: list[Interval] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def inside(pieces: list[Interval], starts: list[int], t: int) -> bool:
    """Whether instant ``t`` lies in the union ``pieces`` (``starts``: their starts)."""
    i = bisect.bisect_right(starts, t) - 1
    return i >= 0 and pieces[i][0] <= t < pieces[i][1]


class Trace:
    """What the oracle reads from one raw trace."""

    def __init__(self, path: Path) -> None:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            doc = json.load(f, parse_float=Decimal)
        raw = doc["traceEvents"] if isinstance(doc, dict) else doc
        spans = [e for e in raw if isinstance(e, dict) and e.get("ph") == "X"]
        launch: dict[Any, int] = {}
        copies: list[Interval] = []
        syncs: list[Interval] = []
        ops: list[Interval] = []
        self.work: list[dict[str, Any]] = []
        self.steps: dict[int, Interval] = {}
        for e in spans:
            cat, name = e.get("cat") or "", str(e.get("name", ""))
            args = e.get("args") or {}
            start = ns(e["ts"])
            iv = (start, start + ns(e.get("dur", 0)))
            if RUNTIME.match(cat):
                if "correlation" in args:
                    c = args["correlation"]
                    launch[c] = min(launch.get(c, iv[0]), iv[0])
                if SYNC_NAME.search(name):
                    syncs.append(iv)
                elif "memcpy" in name.lower() and (
                        H2D_NAME.search(name) if H2D_NAME.search(name) or
                        OTHER_DIRECTION.search(name) else str(args.get("kind")) == "1"):
                    copies.append(iv)
            elif cat == "cuda_sync" or (cat == MTIA_CATEGORY and name == MTIA_WAIT):
                syncs.append(iv)
            elif cat == "cpu_op":
                ops.append(iv)
            elif STEP.match(name) and cat == "user_annotation":
                self.steps[int(STEP.match(name).group(1))] = iv  # type: ignore[union-attr]
            if cat in WORK_CATEGORIES or (cat == MTIA_CATEGORY and name != MTIA_WAIT):
                if (cat == "gpu_memcpy" and H2D_NAME.search(name)) or (
                        name == "dma_request" and args.get("direction") == "HOST_TO_DEVICE"):
                    copies.append(iv)
                self.work.append({
                    "span": iv, "launch": args.get("correlation"),
                    "device": int(args["device"]) if "device" in args else int(e["pid"]),
                })
        self.launch = launch
        self.copy = merged(copies)
        self.held = merged(copies + syncs)
        self.host = merged(copies + syncs + ops)

    def launched_at(self, w: dict[str, Any]) -> int | None:
        return None if w["launch"] is None else self.launch.get(w["launch"])


def gaps_of(trace: Trace, work: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    """``(start, end, cut)`` of each gap between the pieces of ``work``'s union; ``cut``:
    where the next work's launch began, clipped to the gap (its end when unknown)."""
    timed = sorted((w["span"][0], -w["span"][1], i) for i, w in enumerate(work)
                   if w["span"][1] > w["span"][0])
    out = []
    reach = None
    for s, neg_e, i in timed:
        e = -neg_e
        if reach is not None and s > reach:
            at = trace.launched_at(work[i])
            out.append((reach, s, s if at is None else min(max(at, reach), s)))
        reach = e if reach is None else max(reach, e)
    return out


def split(trace: Trace, gap: tuple[int, int, int]) -> list[tuple[int, int, str]]:
    """The gap cut where its explanation changes: ``(start, end, cause)``."""
    a, b, cut = gap
    unions = (trace.copy, trace.held, trace.host)
    points = {a, b, cut}
    for u in unions:
        for s, e in u[bisect.bisect_left([p[1] for p in u], a):]:
            if s >= b:
                break
            points.update(t for t in (s, e) if a < t < b)
    cuts = sorted(points)
    starts = [[p[0] for p in u] for u in unions]
    out = []
    for x, y in zip(cuts, cuts[1:], strict=False):
        if inside(trace.copy, starts[0], x):
            cause = "h2d_copy"
        elif inside(trace.held, starts[1], x):
            cause = "sync"
        elif x >= cut:
            cause = "launch_latency"
        elif inside(trace.host, starts[2], x):
            cause = "host_dispatch"
        else:
            cause = "unknown"
        out.append((x, y, cause))
    return out


def expected_causes(trace: Trace) -> dict[int, Counter[str]]:
    """Per device: idle time per cause."""
    out: dict[int, Counter[str]] = {}
    for device in sorted({w["device"] for w in trace.work}):
        mine = [w for w in trace.work if w["device"] == device]
        total: Counter[str] = Counter({c: 0 for c in CAUSES})
        for gap in gaps_of(trace, mine):
            for x, y, cause in split(trace, gap):
                total[cause] += y - x
        out[device] = total
    return out


def expected_steps(trace: Trace) -> dict[int, dict[str, int]]:
    """Per step: launches, and idle per cause within the step (all devices as one)."""
    pieces = [piece for gap in gaps_of(trace, trace.work) for piece in split(trace, gap)]
    out = {}
    for n, (s, e) in trace.steps.items():
        row = {f"{c}_ns": 0 for c in CAUSES}
        for x, y, cause in pieces:
            row[f"{cause}_ns"] += max(0, min(y, e) - max(x, s))
        row["launches"] = sum(
            1 for w in trace.work
            if (at := trace.launched_at(w)) is not None and s <= at < e)
        out[n] = row
    return out


def gaps_json(path: Path) -> dict[str, Any]:
    done = CliRunner().invoke(cli, ["gaps", str(path), "--json"])
    assert done.exit_code == 0, done.output
    found: dict[str, Any] = json.loads(done.stdout)
    return found


def corpus(name: str) -> Path:
    if not CORPUS:
        pytest.skip("NEURONTRACE_CORPUS is not set (make test sets it)")
    return Path(CORPUS) / name


@pytest.mark.parametrize("name", NAMES or ["(no corpus)"])
def test_idle_by_cause_is_the_time_each_cause_was_happening(name: str) -> None:
    """Per device, each cause's idle time equals the raw JSON's instant-by-instant split,
    to the nanosecond, and the causes add up to the idle time."""
    path = corpus(name)
    expected = expected_causes(Trace(path))
    got = {d["device"]: d for d in gaps_json(path)["devices"]}
    assert set(got) == set(expected)
    for device, causes in expected.items():
        assert {c: got[device][f"{c}_ns"] for c in CAUSES} == dict(causes), (name, device)
        assert sum(causes.values()) == got[device]["idle_ns"]


@pytest.mark.parametrize("name", NAMES or ["(no corpus)"])
def test_steps_count_the_launches_of_their_own_ops_and_split_idle_by_cause(
        name: str) -> None:
    """Per ProfilerStep: launches made within it (none of the work launched before the
    profiler started) and its idle time per cause, as the raw JSON gives them."""
    path = corpus(name)
    trace = Trace(path)
    expected = expected_steps(trace)
    got = {r["step"]: r for r in steps(events(path)).iter_rows(named=True)}
    assert set(got) == set(expected)
    for n, row in expected.items():
        assert {k: got[n][k] for k in row} == row, (name, n)
