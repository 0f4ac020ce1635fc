"""Where a conversion's memory peaks: the resident set of this process beside the code it
was running, sampled every 0.1 s through one ``neurontrace convert --force`` run in this process.

    python bench/memory_phases.py TRACE.json [--top 5]

Prints, for each stretch of the run spent in one place (the innermost three frames of
neurontrace's own code on the main thread), when it ran and the largest resident set seen
there (this process; with the worker processes, ``tree``), then the stacks of the largest
samples. Run from the checkout it measures (its ``neurontrace`` first on ``sys.path``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
Sample = tuple[float, int, int, list[str]]


def _rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS"))


def _ours(stack: traceback.StackSummary) -> list[str]:
    """The frames of this checkout's code (not the libraries'), outermost first."""
    return [f"{Path(s.filename).relative_to(ROOT)}:{s.lineno} {s.name}" for s in stack
            if s.filename.startswith(str(ROOT)) and "site-packages" not in s.filename]


def sampled(trace: Path) -> list[Sample]:
    """(seconds since the start, tree RSS, own RSS, stack) every 0.1 s of a conversion."""
    sys.path.insert(0, str(HERE))
    from convert import _tree_rss  # bench/convert.py: the same sum of the process tree
    # this checkout's command line (an editable install may map neurontrace.cli elsewhere)
    spec = importlib.util.spec_from_file_location(
        "neurontrace.cli", ROOT / "cli" / "__init__.py",
        submodule_search_locations=[str(ROOT / "cli")])
    assert spec is not None and spec.loader is not None
    sys.modules["neurontrace.cli"] = cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    from neurontrace.cli.main import main as command_line
    main, me, samples, stop = threading.main_thread().ident, os.getpid(), [], threading.Event()
    t0 = time.perf_counter()

    def sample() -> None:
        while not stop.wait(0.1):
            frame = sys._current_frames().get(main) if main is not None else None
            stack = _ours(traceback.extract_stack(frame)) if frame is not None else []
            samples.append((time.perf_counter() - t0, _tree_rss(me), _rss(me), stack))

    out = Path(tempfile.mkdtemp(prefix="nt-phases-"))
    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    sys.argv = ["neurontrace", "convert", "--force", str(trace), str(out / "trace.parquet")]
    try:
        command_line()
    except SystemExit as e:
        if e.code:
            raise
    finally:
        stop.set()
        thread.join()
        shutil.rmtree(out, ignore_errors=True)  # the benchmark leaves no file behind
    return samples


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("trace", type=Path)
    ap.add_argument("--top", type=int, default=5, help="stacks of the largest samples")
    a = ap.parse_args()
    samples = sampled(a.trace.resolve())
    mib = 1 << 20
    places: dict[str, list[float]] = {}
    for t, tree, own, stack in samples:
        where = " < ".join(s.split(" ")[1] for s in reversed(stack[-3:])) or "(start)"
        first, _, top_own, top_tree = places.setdefault(where, [t, t, 0, 0])
        places[where] = [first, t, max(top_own, own / mib), max(top_tree, tree / mib)]
    print(f"{'seconds':>13} {'own MiB':>8} {'tree MiB':>9}  innermost frames")
    for where, (first, last, own, tree) in places.items():
        print(f"{first:6.1f}-{last:6.1f} {own:8.0f} {tree:9.0f}  {where}")
    for t, tree, own, stack in sorted(samples, key=lambda s: -s[2])[:a.top]:
        print(f"\n{t:.1f} s: own {own / mib:.0f} MiB, tree {tree / mib:.0f} MiB")
        for line in stack[-6:]:
            print(f"    {line}")


if __name__ == "__main__":  # the guard spawn's workers need: they import this script
    sys.path.insert(0, str(ROOT))
    main()
