"""Peak memory of ``neurontrace convert`` as traces grow: CPU traces of several sizes,
the largest gzipped too, and CUDA traces of the same sizes.

    python bench/memory.py [--sizes 0.5 1 2] [--no-cuda]

The traces are made first when missing (bench/make_big_trace.py, no torch needed: a real
torch trace's events repeated, ids and times moved on): ``bench/data/trace_<N>gb.json``
from the CPU training fixture, and ``bench/data/cuda_<N>gb.json`` from the CUDA RMSNorm
capture, whose runtime and kernel rows all have to be linked to their ops. Each
conversion runs in a fresh process (``python -m neurontrace.cli.main convert``); its peak
RSS is that of the process and its worker processes together (see ``measure`` in
bench/convert.py), interpreter and imports included.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from convert import measure  # noqa: E402  (bench/convert.py: one way to measure)

GIB = 1 << 30
CUDA = ROOT / "fixtures" / "capture" / "cuda" / "naive" / "trace.json.gz"


def _trace(kind: str, gb: float, gzip: bool) -> Path:
    label = f"{gb:g}".replace(".", "_")
    path = HERE / "data" / f"{kind}_{label}gb.json"
    want = [path, path.with_name(path.name + ".gz")] if gzip else [path]
    if not all(p.exists() for p in want):
        cmd = [sys.executable, str(HERE / "make_big_trace.py"), str(path), "--gb", str(gb)]
        if kind == "cuda":
            cmd += ["--source", str(CUDA)]
        subprocess.run(cmd + (["--gzip"] if gzip else []), check=True)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", type=float, nargs="+", default=[0.5, 1.0, 2.0],
                    help="sizes of the CPU traces, GB")
    ap.add_argument("--no-cuda", action="store_true", help="skip the CUDA traces")
    a = ap.parse_args()
    top = max(a.sizes)
    runs = [_trace("trace", gb, gb == top) for gb in a.sizes]
    runs.append(runs[-1].with_name(runs[-1].name + ".gz"))
    if not a.no_cuda:
        runs += [_trace("cuda", gb, False) for gb in a.sizes]
    out = Path(tempfile.mkdtemp(prefix="nt-mem-"))
    try:
        import pyarrow.parquet as pq

        print(f"{'input':<28}{'size GB':>9}{'rows':>12}{'wall s':>9}{'peak RSS MiB':>14}"
              f"{'B/row':>7}")
        worst = 0
        for src in runs:
            dst = out / f"{src.name}.parquet"
            cmd = [sys.executable, "-m", "neurontrace.cli.main", "convert", "--force",
                   str(src), str(dst)]
            wall, rss_mib, _, _ = measure(cmd)
            rss = int(rss_mib * (1 << 20))
            rows = pq.read_metadata(dst).num_rows
            worst = max(worst, rss)
            print(f"{src.name:<28}{src.stat().st_size / 1e9:>9.2f}{rows:>12,}{wall:>9.1f}"
                  f"{rss / (1 << 20):>14.0f}{rss / rows:>7.0f}")
            dst.unlink()
    finally:
        shutil.rmtree(out, ignore_errors=True)  # nothing left behind, even on Ctrl-C
    verdict = "under" if worst < GIB else "OVER"
    print(f"peak RSS {worst / (1 << 20):.0f} MiB: {verdict} the 1 GiB bound")


if __name__ == "__main__":
    main()
