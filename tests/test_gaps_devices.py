"""``gaps --json`` ``devices``: idle per device, the union of its streams, checked on every
corpus trace against a computation from the raw JSON with the standard library only.

Device work, as the Kineto reader classifies it (``neurontrace/readers/kineto/roles.py``):
complete (``X``) events of category ``kernel``, ``gpu_memcpy`` or ``gpu_memset``, and
MTIA's ``mtia_ccp_events`` except ``event_wait`` (a device-side wait, not work). The
device is the event's ``args.device``, else its ``pid`` (MTIA writes no device index).
Times are exact: Kineto's ``ts``/``dur`` are microseconds with (at most) 3 decimals, read
as decimal text and multiplied by 1000. Work of zero length occupies no time and is left
out, also from the span. Skipped, saying why, without NEURONTRACE_CORPUS.
"""

from __future__ import annotations

import gzip
import json
import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from neurontrace.cli.main import cli

CORPUS = os.environ.get("NEURONTRACE_CORPUS")
NAMES = sorted(p.name for p in Path(CORPUS).glob("*.json.gz")) if CORPUS else []
#: Corpus traces without any device work (a CPU-only run; CUPTI profiler ranges only).
HOST_ONLY = {"cpu_only.json.gz", "cupti_profiler.json.gz"}

WORK_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
MTIA_CATEGORY, MTIA_WAIT = "mtia_ccp_events", "event_wait"


def ns(v: Any) -> int:
    """Microseconds (int or decimal text) to whole nanoseconds, exactly."""
    exact = Decimal(v) * 1000
    assert exact == exact.to_integral_value(), f"{v} us is not a whole number of ns"
    return int(exact)


def is_work(e: dict[str, Any]) -> bool:
    cat = e.get("cat")
    return e.get("ph") == "X" and (
        cat in WORK_CATEGORIES or (cat == MTIA_CATEGORY and e.get("name") != MTIA_WAIT)
    )


def expected_devices(path: Path) -> dict[int, dict[str, int]]:
    """Per device: ``span_ns`` (first start to last end), ``busy_ns`` (the union of its
    work's intervals), ``idle_ns``; from the raw JSON, standard library only."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        doc = json.load(f, parse_float=Decimal)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    spans: dict[int, list[tuple[int, int]]] = {}
    for e in events:
        if not isinstance(e, dict) or not is_work(e):
            continue
        dur = ns(e["dur"])
        if dur <= 0:
            continue
        args = e.get("args") or {}
        device = int(args["device"]) if "device" in args else int(e["pid"])
        start = ns(e["ts"])
        spans.setdefault(device, []).append((start, start + dur))
    out = {}
    for device, ivs in spans.items():
        ivs.sort()
        busy = 0
        lo, hi = ivs[0][0], max(end for _, end in ivs)
        cur_s, cur_e = ivs[0]
        for s, e in ivs[1:]:
            if s > cur_e:
                busy += cur_e - cur_s
                cur_s, cur_e = s, e
            else:
                cur_e = max(cur_e, e)
        busy += cur_e - cur_s
        out[device] = {"span_ns": hi - lo, "busy_ns": busy, "idle_ns": hi - lo - busy}
    return out


def gaps_json(path: Path) -> dict[str, Any]:
    """What ``neurontrace gaps PATH --json`` prints."""
    done = CliRunner().invoke(cli, ["gaps", str(path), "--json"])
    assert done.exit_code == 0, done.output
    found: dict[str, Any] = json.loads(done.stdout)
    return found


@pytest.mark.parametrize("name", NAMES or ["(no corpus)"])
def test_device_idle_is_the_union_of_its_streams_on_every_corpus_trace(name: str) -> None:
    """Per device, span, busy and idle equal those computed from the raw JSON, to the ns;
    a trace without device work reports no device (and the raw JSON has none)."""
    if not CORPUS:
        pytest.skip("NEURONTRACE_CORPUS is not set (make test sets it)")
    path = Path(CORPUS) / name
    expected = expected_devices(path)
    got = gaps_json(path)["devices"]
    if name in HOST_ONLY:
        assert expected == {} and got == [], f"{name} has no device work: no device rows"
        return
    assert expected, f"{name} is expected to have device work"
    assert len({d["rank"] for d in got}) == 1  # one trace, one rank
    assert {d["device"]: {k: d[k] for k in ("span_ns", "busy_ns", "idle_ns")}
            for d in got} == expected


def test_nccl_trace_idle_is_not_the_sum_of_its_streams() -> None:
    """On the NCCL trace (a compute and a communication stream) the device's idle time is
    less than the sum of its two streams' idle times: the union, not the sum."""
    if not CORPUS:
        pytest.skip("NEURONTRACE_CORPUS is not set (make test sets it)")
    path = Path(CORPUS) / "nccl_parser_config.json.gz"
    found = gaps_json(path)
    (device,) = found["devices"]
    assert device["tracks"] == len(found["tracks"]) == 2
    assert device["idle_ns"] < sum(t["idle_ns"] for t in found["tracks"])
    assert device["busy_ns"] > max(t["busy_ns"] for t in found["tracks"])
