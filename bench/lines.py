"""Lines of the conversion code (readers, derivations, io, the pipeline) at two commits.

    python bench/lines.py [BASE [HEAD]]      # defaults: dd63b7a (before issue 14), the work tree
    python bench/lines.py --commits [BASE [HEAD]]   # each commit's change, per part

``--commits`` says which commits moved the count (those that did, with their subject),
so that the growth can be put down to what each commit added.

A module is put in its part by where it lives now, or by its old flat name before the
layout of issue 14 (``neurontrace/sweep.py`` was a derivation); the Neuron readers
(``readers/neuron/``, once ``readers/neuron_*.py``) are counted apart from the others.
``code`` counts the lines that hold a token other than a comment or a docstring; ``all``
counts every line.
"""

from __future__ import annotations

import argparse
import ast
import io
import subprocess
import sys
import tokenize
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Issue 14's layout, and the flat names of the modules before it.
PARTS = {
    "neuron": ("neurontrace/readers/neuron/", "neurontrace/readers/neuron.py",
               "neurontrace/readers/neuron_"),
    "readers": ("neurontrace/readers/", "neurontrace/units.py"),
    "derivations": ("neurontrace/table/", "neurontrace/assemble.py", "neurontrace/sweep.py",
                    "neurontrace/linking.py", "neurontrace/nesting.py", "neurontrace/spill.py"),
    "io": ("neurontrace/io/", "neurontrace/store.py", "neurontrace/atomic.py",
           "neurontrace/destination.py", "neurontrace/digest.py", "neurontrace/scratch.py",
           "neurontrace/ahead.py"),
    "pipeline": ("neurontrace/convert.py", "neurontrace/conversion/", "neurontrace/workers/",
                 "neurontrace/executors.py", "neurontrace/splitting.py",
                 "neurontrace/quickstart.py"),
}


def part(path: str) -> str | None:
    return next((name for name, prefixes in PARTS.items()
                 if any(path == p or (p.endswith(("/", "_")) and path.startswith(p))
                        for p in prefixes)), None)


def code_lines(source: str) -> int:
    """Lines holding a token that is not a comment, a docstring or a line break."""
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        first = body[0] if isinstance(body, list) and body else None
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                and isinstance(first.value.value, str):
            docstrings.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    lines = set()
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
            tokenize.DEDENT, tokenize.ENCODING, tokenize.ENDMARKER}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in skip:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines - docstrings)


def files(rev: str | None) -> dict[str, str]:
    if rev is None:
        return {str(p.relative_to(ROOT)): p.read_text()
                for p in (ROOT / "neurontrace").rglob("*.py")}
    names = subprocess.run(["git", "ls-tree", "-r", "--name-only", rev, "neurontrace"],
                           cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return {n: subprocess.run(["git", "show", f"{rev}:{n}"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout
            for n in names.split() if n.endswith(".py")}


def count(rev: str | None) -> tuple[Counter[str], Counter[str]]:
    everything, code = Counter[str](), Counter[str]()
    for path, source in files(rev).items():
        if (name := part(path)) is not None:
            everything[name] += source.count("\n")
            code[name] += code_lines(source)
    return everything, code


def commits(base: str, head: str | None) -> None:
    """Each commit from ``base`` to ``head`` (default HEAD) that changed the code lines:
    its change in all, per part, and its subject."""
    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=ROOT, check=True, capture_output=True,
                              text=True).stdout
    before = count(base)[1]
    for rev in git("rev-list", "--reverse", f"{base}..{head or 'HEAD'}").split():
        after = count(rev)[1]
        moved = {name: after[name] - before[name] for name in PARTS
                 if after[name] != before[name]}
        if moved:
            parts = ", ".join(f"{name} {n:+d}" for name, n in moved.items())
            subject = git("log", "-1", "--format=%s", rev).strip()[:90]
            print(f"{rev[:7]} {sum(moved.values()):+5d}  ({parts})  {subject}")
        before = after


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("base", nargs="?", default="dd63b7a")
    ap.add_argument("head", nargs="?", default=None, help="a commit (default: the work tree)")
    ap.add_argument("--commits", action="store_true", help="each commit's change, per part")
    args = ap.parse_args()
    if args.commits:
        commits(args.base, args.head)
        return
    (b_all, b_code), (h_all, h_code) = count(args.base), count(args.head)
    print(f"{'part':<12} {'code ' + args.base:>14} {'code now':>10} {'all ' + args.base:>13} "
          f"{'all now':>9}")
    for name in [*PARTS, "total"]:
        b, h, ba, ha = ((sum(c.values()) if name == "total" else c[name])
                        for c in (b_code, h_code, b_all, h_all))
        print(f"{name:<12} {b:>14,} {h:>10,} {ba:>13,} {ha:>9,}")
    change = sum(h_code.values()) / sum(b_code.values()) - 1
    print(f"code lines {change:+.1%}", file=sys.stderr)


if __name__ == "__main__":
    main()
