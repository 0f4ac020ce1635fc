"""Conversion speed and memory against the baselines, in one run.

    python bench/convert.py [TRACE.json] [--runs 3] [--grouped] [--cuda SOURCE]
                            [--code NAME=CHECKOUT ...] [--only-code] [--prefault GIB]

Without a trace it makes one (~300 MB, see bench/make_trace.py; needs torch); with
``--cuda SOURCE`` it makes a ~300 MB device-heavy one instead from a real CUDA trace
(bench/make_big_trace.py; e.g. a multi-stream trace of the corpus). ``--code`` adds
``neurontrace convert`` run from another checkout (from its folder, which is also put on
``PYTHONPATH``; this interpreter), to compare two versions in the same run. Each
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
import shutil
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
    "shutil.rmtree(d)\n"
)


#: Allocates and touches this many GiB, then exits (see :func:`prefault`).
TOUCH = ("import sys; b = bytearray(int(float(sys.argv[1]) * (1 << 30))); "
         "b[::4096] = b'1' * len(b[::4096])")


def prefault(gib: float) -> None:
    """Touch ``gib`` GiB of fresh memory in a process of its own, then free it.

    Every method's time includes first touches of fresh pages (minor page faults,
    printed): on the CPU trace ``orjson.loads`` makes about 570 k, ``convert`` about
    340 k over its processes, at about 1.9 us of system time each on the reference VM
    (3 GiB touched: 788 k faults, 1.45 s). On a virtual machine whose host takes freed
    memory back (virtio-balloon free page reporting) a first touch also waits for the
    host, more or less depending on what ran before; touching more than any method's
    peak just before each run starts every method from the same, host-backed, memory.
    """
    subprocess.run([sys.executable, "-c", TOUCH, str(gib)], check=True)


def measure(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
            ) -> tuple[float, float, float, int]:
    """Wall seconds, peak RSS (MiB), CPU seconds and minor page faults of one fresh
    process, its workers included (the CPU time and faults of those it waited for).

    The peak is the largest sum of the resident sets of the process and every process
    under it, sampled every 10 ms from /proc (Linux; pages shared between them, such as
    libraries, count once per process, so this overstates), and never less than
    ``ru_maxrss`` from ``os.wait4`` (the largest single process, exactly).
    """
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd,
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
    cpu = usage.ru_utime + usage.ru_stime
    return wall, max(peak[0], usage.ru_maxrss * 1024) / (1 << 20), cpu, usage.ru_minflt


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


#: ``neurontrace convert`` of the checkout ``sys.argv[1]``, its own ``cli/`` included: the
#: editable install maps ``neurontrace.cli`` to this checkout's ``cli/`` whatever
#: ``sys.path`` says, so a plain ``python -m neurontrace.cli.main`` would mix the two.
CHECKOUT_CLI = (
    "import importlib.util, sys\n"
    "root = sys.argv.pop(1)\n"
    "spec = importlib.util.spec_from_file_location('neurontrace.cli', root + '/cli/__init__.py',"
    " submodule_search_locations=[root + '/cli'])\n"
    "mod = importlib.util.module_from_spec(spec)\n"
    "sys.modules['neurontrace.cli'] = mod\n"
    "spec.loader.exec_module(mod)\n"
    "from neurontrace.cli.main import main\n"
    "sys.argv[0] = 'neurontrace'\n"
    "main()\n"
)


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
    ap.add_argument("--only-code", action="store_true",
                    help="time only the --code checkouts, not this one")
    ap.add_argument("--prefault", type=float, default=3.0, metavar="GIB",
                    help="touch this much memory before each run (0: do not; see prefault)")
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
    trace = a.trace.resolve()
    size = trace.stat().st_size
    out_dir = Path(tempfile.mkdtemp(prefix="nt-bench-"))
    try:
        out = out_dir / "trace.parquet"
        nt = [sys.executable, "-m", "neurontrace.cli.main", "convert", "--force", str(trace),
              str(out)]
        methods: dict[str, list[str]] = {"orjson.loads": [sys.executable, "-c", ORJSON, str(trace)]}
        if not a.only_code:
            methods["neurontrace convert"] = nt
        where: dict[str, Path] = {}
        for given in a.code:
            name, _, checkout = given.partition("=")
            # run from the checkout (first on sys.path), with its own cli
            root = Path(checkout).resolve()
            methods[f"convert ({name})"] = [sys.executable, "-c", CHECKOUT_CLI, str(root),
                                            *nt[3:]]
            where[f"convert ({name})"] = root
        if has_hta():
            methods["HolisticTraceAnalysis load"] = [sys.executable, "-c", HTA, str(trace)]
        results: dict[str, list[tuple[float, float, float, int]]] = {m: [] for m in methods}
        order = ([m for m in methods for _ in range(a.runs)] if a.grouped
                 else [m for _ in range(a.runs) for m in methods])
        for m in order:
            if a.prefault:
                prefault(a.prefault)
            env = {"PYTHONPATH": str(where[m])} if m in where else None
            results[m].append(measure(methods[m], env, where.get(m)))
        med = {m: tuple(statistics.median(r[i] for r in rs) for i in range(4))
               for m, rs in results.items()}
        how = "grouped by method" if a.grouped else "interleaved"
        touched = f", {a.prefault:g} GiB touched before each" if a.prefault else ""
        print(f"trace: {trace} ({size / 1e6:.0f} MB), median of {a.runs} runs ({how}), "
              f"fresh process each{touched}")
        print(f"{'method':<30}{'wall s':>9}{'peak RSS MiB':>15}{'CPU s':>8}{'minor faults':>14}")
        for m, (w, k, c, f) in med.items():
            print(f"{m:<30}{w:>9.2f}{k:>15.0f}{c:>8.2f}{f:>14,.0f}")
        print()
        ours = [m for m in methods if m == "neurontrace convert" or m.startswith("convert (")]
        for mine in ours:
            for m, (w, *_) in med.items():
                if m not in ours:
                    print(f"{mine} / {m}: {med[mine][0] / w:.2f}x the wall time")
        print(f"Parquet size / JSON size: {out.stat().st_size / size:.3f} "
              f"({out.stat().st_size / 1e6:.1f} MB)")

    finally:
        shutil.rmtree(out_dir, ignore_errors=True)  # the benchmark leaves no file behind

if __name__ == "__main__":
    main()
