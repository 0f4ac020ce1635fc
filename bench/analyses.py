"""Time each analysis on the Parquet of the benchmark trace.

    python bench/make_trace.py bench/data/trace_300mb.json --steps 180
    neurontrace convert bench/data/trace_300mb.json bench/data/trace_300mb.parquet
    python bench/analyses.py bench/data/trace_300mb.parquet

Each analysis runs on a fresh lazy scan of the file (so reading the columns it needs is
part of its time), ``--repeat`` times in this process; the median is printed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from neurontrace import analyses as A
from neurontrace.io import store

CASES: dict[str, Callable[[Path], Any]] = {
    "ops --layer framework": lambda p: A.ops(A.events(p)),
    "ops --layer device": lambda p: A.ops(A.events(p), layer="device"),
    "gaps": lambda p: A.gaps(A.events(p)),
    "copies": lambda p: A.copies(A.events(p)),
    "steps": lambda p: A.steps(A.events(p)),
    "report": lambda p: A.report(A.events(p)),
    "compare (2 runs)": lambda p: A.compare({"a": A.events(p), "b": A.events(p)}),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("parquet", nargs="?", default="bench/data/trace_300mb.parquet")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    path = Path(a.parquet)
    if not path.exists():
        sys.exit(f"{path}: not found; make it as this script's docstring says")
    rows = store.scan(path).select("row").collect().height
    size = path.stat().st_size / 1e6
    print(f"{path}: {rows:,} events, {size:.1f} MB of Parquet\n")
    print(f"| analysis | median of {a.repeat} (s) |")
    print("|---|---|")
    for name, fn in CASES.items():
        times = []
        for _ in range(a.repeat):
            t = time.perf_counter()
            fn(path)
            times.append(time.perf_counter() - t)
        print(f"| `{name}` | {statistics.median(times):.2f} |")


if __name__ == "__main__":
    main()
