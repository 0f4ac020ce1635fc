"""Time each analysis command as a whole process on converted traces: interpreter start,
imports, reading the Parquet and printing included, as a user waits for it.

    python bench/make_trace.py bench/data/trace_300mb.json --steps 180
    neurontrace convert bench/data/trace_300mb.json bench/data/trace_300mb.parquet
    python bench/analyses.py bench/data/trace_300mb.parquet

    # the CUDA case: a real 4-stream CUDA trace from the corpus grown to ~300 MB
    python bench/make_big_trace.py bench/data/cuda_300mb.json --gb 0.3 \\
        --source ../shared/corpus/kineto/trace_diff.json.gz
    neurontrace convert bench/data/cuda_300mb.json bench/data/cuda_300mb.parquet
    python bench/analyses.py bench/data/trace_300mb.parquet --cuda   # both

After one untimed round (:func:`warm`), each command runs ``--repeat`` times (default
3) in a fresh process; the table gives the median wall time and the median CPU time
(user + system of the process) per command and trace. Runs are interleaved (every
command once, then again), so a machine that gets busier affects all of them alike.
``--python LABEL=PATH`` adds an interpreter (another checkout's virtual environment)
timed in the same rounds, to compare code.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

#: The commands timed, as given to ``neurontrace``.
COMMANDS: tuple[tuple[str, ...], ...] = (
    ("gaps",),
    ("steps",),
    ("ops",),
    ("ops", "--layer", "device"),
    ("copies",),
    ("report",),
)

CPU_TRACE = Path("bench/data/trace_300mb.parquet")
CUDA_TRACE = Path("bench/data/cuda_300mb.parquet")


def warm(python: str, trace: Path) -> None:
    """One untimed run of every command, writing bytecode (``PYTHONDONTWRITEBYTECODE``
    unset): an installed package has its bytecode, and the trace is then in the page
    cache for every timed run alike."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for command in COMMANDS:
        subprocess.run([python, "-P", "-m", "neurontrace.cli.main", *command, str(trace)],
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       check=True)


def run(python: str, command: tuple[str, ...], trace: Path) -> tuple[float, float]:
    """Wall and CPU seconds of ``python -P -m neurontrace.cli.main COMMAND TRACE`` (``-P``:
    the current folder is not put first on ``sys.path``, so each interpreter runs the
    code it was installed with, whatever folder this script runs in)."""
    argv = [python, "-P", "-m", "neurontrace.cli.main", *command, str(trace)]
    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        sys.exit(f"{' '.join(argv)} failed ({proc.returncode}): {err.strip()}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", type=Path,
                    help=f"converted traces (default: {CPU_TRACE})")
    ap.add_argument("--cuda", action="store_true",
                    help=f"time {CUDA_TRACE} too (alone when no trace is given)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--python", action="append", default=[], metavar="LABEL=PATH",
                    help="another interpreter to time in the same rounds")
    a = ap.parse_args()
    traces = list(a.traces) or ([] if a.cuda else [CPU_TRACE])
    if a.cuda:
        traces.append(CUDA_TRACE)
    for trace in traces:
        if not trace.exists():
            sys.exit(f"{trace}: not found; make it as this script's docstring says")
    pythons = {"this": sys.executable}
    for item in a.python:
        label, _, path = item.partition("=")
        pythons[label] = path
    for python in pythons.values():
        for trace in traces:
            warm(python, trace)
    times: dict[tuple[str, str, tuple[str, ...]], list[tuple[float, float]]] = {}
    for _ in range(a.repeat):
        for trace in traces:
            for command in COMMANDS:
                for label, python in pythons.items():
                    key = (label, str(trace), command)
                    times.setdefault(key, []).append(run(python, command, trace))
    print(f"median of {a.repeat} whole processes, wall (CPU) seconds\n")
    print("| command | trace | " + " | ".join(pythons) + " |")
    print("|---|---|" + "---|" * len(pythons))
    for trace in traces:
        for command in COMMANDS:
            cells = []
            for label in pythons:
                runs = times[(label, str(trace), command)]
                wall = statistics.median(w for w, _ in runs)
                cpu = statistics.median(c for _, c in runs)
                cells.append(f"{wall:.2f} ({cpu:.2f})")
            print(f"| `{' '.join(command)}` | {trace.name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
