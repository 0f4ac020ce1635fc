"""Conversion speed and memory against the baselines, in one run.

    python bench/convert.py [TRACE.json] [--runs 3] [--grouped] [--cuda SOURCE]
                            [--code NAME=CHECKOUT ...]

Without a trace it makes one (~300 MB, see bench/make_trace.py; needs torch); with
``--cuda SOURCE`` it makes a ~300 MB device-heavy one instead from a real CUDA trace
(bench/make_big_trace.py; e.g. a multi-stream trace of the corpus). ``--code`` adds
``neurontrace convert`` run from another checkout (its folder on ``PYTHONPATH``, this
interpreter), to compare two versions in the same run. Each
method runs in a fresh process, one after another, ``--runs`` times; the table shows the
median wall time and peak RSS of the whole process (interpreter start and imports
included; for neurontrace, its worker processes added in), then neurontrace's ratios to
the baselines:

- ``orjson.loads``: read the file and parse it into Python objects (nothing else);
- ``HolisticTraceAnalysis``: its trace load, when ``hta`` is installed;
- ``neurontrace convert``: the whole conversion to Parquet.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).parent
DEFAULT = HERE / "data" / "trace_300mb.json"

ORJSON = (
    "import orjson, sys; d = orjson.loads(open(sys.argv[1], 'rb').read()); "
    "print(len(d['traceEvents']))"
)
HTA = (
    "import sys, os, shutil, tempfile\n"
    "from hta.trace_analysis import TraceAnalysis\n"
    "d = tempfile.mkdtemp(); shutil.copy(sys.argv[1], os.path.join(d, 'rank-0.json'))\n"
    "a = TraceAnalysis(trace_dir=d)\n"
    "print(len(a.t.get_trace(0)))\n"
)


def measure(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one fresh process, its workers included.

    The peak is the largest sum of the resident sets of the process and every process
    under it, sampled every 10 ms from /proc (Linux; pages shared between them, such as
    libraries, count once per process, so this overstates), and never less than
    ``ru_maxrss`` from ``os.wait4`` (the largest single process, exactly).
    """
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         env=None if env is None else {**os.environ, **env})
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.01):
            peak[0] = max(peak[0], _tree_rss(p.pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, status, usage = os.wait4(p.pid, 0)
    stop.set()
    sampler.join()
    wall = time.perf_counter() - t0
    err = p.stderr.read().decode() if p.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{err}")
    return wall, max(peak[0], usage.ru_maxrss * 1024) / (1 << 20)


def _tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and its descendants now (0 for those already gone)."""
    total = 0
    todo = [pid]
    while todo:
        q = todo.pop()
        try:
            with open(f"/proc/{q}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
            for task in os.listdir(f"/proc/{q}/task"):
                with open(f"/proc/{q}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except (OSError, ValueError):
            continue
    return total


def has_hta() -> bool:
    r = subprocess.run([sys.executable, "-c", "import hta.trace_analysis"], capture_output=True)
    return r.returncode == 0


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--grouped", action="store_true",
                    help="all runs of one method back to back, then the next method's "
                         "(default: interleaved, so that drift hits all alike)")
    ap.add_argument("--cuda", type=Path, metavar="SOURCE",
                    help="make the trace from this CUDA trace (bench/make_big_trace.py)")
    ap.add_argument("--code", action="append", default=[], metavar="NAME=CHECKOUT",
                    help="also time neurontrace convert from this checkout")
    a = ap.parse_args()
    if a.cuda is not None and not a.trace.exists():
        print(f"making {a.trace} from {a.cuda}...", file=sys.stderr)
        make = [sys.executable, str(HERE / "make_big_trace.py"), str(a.trace), "--gb", "0.3",
                "--source", str(a.cuda)]
        subprocess.run(make, check=True)
    if not a.trace.exists():
        print(f"making {a.trace} (about a minute)...", file=sys.stderr)
        make = [sys.executable, str(HERE / "make_trace.py"), str(a.trace), "--steps", "180"]
        subprocess.run(make, check=True)
    size = a.trace.stat().st_size
    out_dir = Path(tempfile.mkdtemp(prefix="nt-bench-"))
    out = out_dir / "trace.parquet"
    nt = [sys.executable, "-m", "neurontrace.cli.main", "convert", "--force",
          str(a.trace), str(out)]
    methods: dict[str, list[str]] = {
        "orjson.loads": [sys.executable, "-c", ORJSON, str(a.trace)],
        "neurontrace convert": nt,
    }
    envs: dict[str, dict[str, str]] = {}
    for given in a.code:
        name, _, checkout = given.partition("=")
        methods[f"convert ({name})"] = nt
        envs[f"convert ({name})"] = {"PYTHONPATH": str(Path(checkout).resolve())}
    if has_hta():
        methods["HolisticTraceAnalysis load"] = [sys.executable, "-c", HTA, str(a.trace)]
    results: dict[str, list[tuple[float, float]]] = {m: [] for m in methods}
    order = ([m for m in methods for _ in range(a.runs)] if a.grouped
             else [m for _ in range(a.runs) for m in methods])
    for m in order:
        results[m].append(measure(methods[m], envs.get(m)))
    med = {m: (statistics.median(w for w, _ in r), statistics.median(k for _, k in r))
           for m, r in results.items()}
    how = "grouped by method" if a.grouped else "interleaved"
    print(f"trace: {a.trace} ({size / 1e6:.0f} MB), median of {a.runs} runs ({how}), "
          "fresh process each")
    print(f"{'method':<30}{'wall s':>9}{'peak RSS MiB':>15}")
    for m, (w, k) in med.items():
        print(f"{m:<30}{w:>9.2f}{k:>15.0f}")
    w_nt, k_nt = med["neurontrace convert"]
    print()
    for m, (w, _) in med.items():
        if m != "neurontrace convert":
            print(f"neurontrace convert / {m}: {w_nt / w:.2f}x the wall time")
    print(f"Parquet size / JSON size: {out.stat().st_size / size:.3f} "
          f"({out.stat().st_size / 1e6:.1f} MB)")
    print(f"neurontrace peak RSS: {k_nt:.0f} MiB (all its processes together)")


if __name__ == "__main__":
    main()
