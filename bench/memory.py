"""Peak memory of ``neurontrace convert`` on a multi-GB trace, plain and gzipped.

    python bench/memory.py [--gb 2] [--trace bench/data/trace_2gb.json]

Makes the trace first when it is missing (bench/make_big_trace.py: a real torch trace's
events repeated, no torch needed; with ``--gzip``). Each conversion runs in a fresh
process (``python -m neurontrace.cli.main convert``); its peak RSS is that of the process
and its worker processes together (see ``measure`` in bench/convert.py), interpreter and
imports included.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from convert import measure  # noqa: E402  (bench/convert.py: one way to measure)

GIB = 1 << 30


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
        cmd = [sys.executable, "-m", "neurontrace.cli.main", "convert", "--force",
               str(src), str(dst)]
        wall, rss_mib = measure(cmd)
        rss = int(rss_mib * (1 << 20))
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
