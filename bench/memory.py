"""Peak memory of ``neurontrace convert`` on a multi-GB trace, plain and gzipped.

    python bench/memory.py [--gb 2] [--trace bench/data/trace_2gb.json]

Makes the trace first when it is missing (bench/make_big_trace.py: a real torch trace's
events repeated, no torch needed; with ``--gzip``). Each conversion runs in a fresh
process (``python -m neurontrace.cli.main convert``); its peak RSS is ``ru_maxrss`` from
``os.wait4``: the resident set of that process alone, interpreter and imports included.
Worker processes (NEURONTRACE_WORKERS) are not counted; the default is none.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).parent
GIB = 1 << 30


def measure(cmd: list[str]) -> tuple[float, int]:
    """Wall seconds and peak RSS in bytes of one fresh process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode() if p.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{err}")
    return wall, usage.ru_maxrss * 1024


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--gb", type=float, default=2.0)
    ap.add_argument("--trace", type=Path, default=HERE / "data" / "trace_2gb.json")
    a = ap.parse_args()
    gz = a.trace.with_name(a.trace.name + ".gz")
    if not a.trace.exists() or not gz.exists():
        subprocess.run([sys.executable, str(HERE / "make_big_trace.py"), str(a.trace),
                        "--gb", str(a.gb), "--gzip"], check=True)
    out = Path(tempfile.mkdtemp(prefix="nt-mem-"))
    print(f"{'input':<28}{'size GB':>9}{'events':>12}{'wall s':>9}{'peak RSS MiB':>14}")
    worst = 0
    for src in (a.trace, gz):
        dst = out / f"{src.name}.parquet"
        cmd = [sys.executable, "-m", "neurontrace.cli.main", "convert", str(src), str(dst)]
        wall, rss = measure(cmd)
        import pyarrow.parquet as pq

        rows = pq.read_metadata(dst).num_rows
        worst = max(worst, rss)
        print(f"{src.name:<28}{src.stat().st_size / 1e9:>9.2f}{rows:>12,}{wall:>9.1f}"
              f"{rss / (1 << 20):>14.0f}")
        dst.unlink()
    verdict = "under" if worst < GIB else "OVER"
    print(f"peak RSS {worst / (1 << 20):.0f} MiB: {verdict} the 1 GiB bound")


if __name__ == "__main__":
    main()
