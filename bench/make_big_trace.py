"""Make a multi-GB Kineto trace fast, without torch: a real trace's events, repeated.

    python bench/make_big_trace.py OUT.json --gb 2 [--source TRACE.json[.gz]] [--gzip]

Each copy of the source's events is shifted past the previous one in time (its span
plus 1 ms), and every id that links events (``External id``, ``correlation``, flow
``id``, ``Ev Idx``, ``Record function id``, ``Python id``/``Python parent id``,
``Sequence number``) moves on by the source's largest value plus one, so that copies
neither overlap nor link to one another. Metadata events (``ph`` M) are written once.
The default source is ``fixtures/kineto/cpu-mlp-training.json.gz``, a real torch CPU
profile (record_shapes, profile_memory, with_stack). ``--gzip`` writes OUT.json.gz too.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
from pathlib import Path
from typing import Any

import orjson

HERE = Path(__file__).parent
DEFAULT = HERE.parent / "fixtures" / "kineto" / "cpu-mlp-training.json.gz"
ARG_IDS = ("External id", "correlation", "Ev Idx", "Record function id", "Python id",
           "Python parent id", "Sequence number")


def _load(path: Path) -> dict[str, Any]:
    raw = gzip.open(path).read() if path.suffix == ".gz" else path.read_bytes()
    trace: dict[str, Any] = orjson.loads(raw)
    return trace


def _ids_max(events: list[dict[str, Any]]) -> int:
    top = 0
    for e in events:
        if isinstance(e.get("id"), int):
            top = max(top, e["id"])
        for k in ARG_IDS:
            v = (e.get("args") or {}).get(k)
            if isinstance(v, int):
                top = max(top, v)
    return top


def _shifted(e: dict[str, Any], dt: float, di: int) -> dict[str, Any]:
    e = dict(e)
    if "ts" in e:
        e["ts"] = round(e["ts"] + dt, 3)
    if isinstance(e.get("id"), int):
        e["id"] += di
    args = e.get("args")
    if args:
        args = dict(args)
        for k in ARG_IDS:
            v = args.get(k)
            if isinstance(v, int) and v >= 0:
                args[k] = v + di
        e["args"] = args
    return e


def make(out: Path, size: int, source: Path) -> int:
    """Write the trace; return the number of events."""
    trace = _load(source)
    events = trace.pop("traceEvents")
    meta = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    starts = [e["ts"] for e in body if "ts" in e]
    ends = [e["ts"] + e.get("dur", 0) for e in body if "ts" in e]
    period = max(ends) - min(starts) + 1000.0  # µs
    di = _ids_max(body) + 1
    head = orjson.dumps(trace)[:-1] + b',"traceEvents":['
    n = 0
    with open(out, "wb") as f:
        f.write(head)
        f.write(b",\n".join(orjson.dumps(e) for e in meta))
        n += len(meta)
        k = 0
        while f.tell() < size:
            k += 1
            chunk = [orjson.dumps(_shifted(e, k * period, k * di)) for e in body]
            f.write(b",\n" + b",\n".join(chunk))
            n += len(chunk)
        f.write(b"\n]}\n")
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--gb", type=float, default=2.0, help="size in GB (10^9 bytes)")
    ap.add_argument("--source", type=Path, default=DEFAULT)
    ap.add_argument("--gzip", action="store_true", help="also write OUT.gz")
    a = ap.parse_args()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    n = make(a.out, int(a.gb * 1e9), a.source)
    print(f"{a.out}: {a.out.stat().st_size / 1e9:.2f} GB, {n:,} events", file=sys.stderr)
    if a.gzip:
        gz = a.out.with_name(a.out.name + ".gz")
        with open(a.out, "rb") as src, gzip.open(gz, "wb", compresslevel=1) as dst:
            shutil.copyfileobj(src, dst, 16 << 20)
        print(f"{gz}: {gz.stat().st_size / 1e9:.2f} GB", file=sys.stderr)


if __name__ == "__main__":
    main()
