"""Rendering, apart from computing: terminal tables fitted to the width, and JSON.

Tables use colour (a bold header) only when stdout is a terminal (``click.echo`` drops
the escapes otherwise). JSON goes through orjson: integers stay exact, one document per
command, keys as the library's column names.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import click
import orjson
import polars as pl

from neurontrace.diagnostics import Diagnostics
from neurontrace.views.names import short

__all__ = ["short"]  # kernel names abbreviated for the terminal (views.names)

Format = Callable[[Any], str]


def emit_json(obj: Any) -> None:
    opts = orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE
    sys.stdout.buffer.write(orjson.dumps(obj, option=opts))
    sys.stdout.flush()


def records(df: pl.DataFrame) -> list[dict[str, Any]]:
    return df.to_dicts()


# -- values -------------------------------------------------------------------------------

def duration(ns: Any) -> str:
    if ns is None:
        return "-"
    v = float(ns)
    a = abs(v)
    if a < 1e3:
        return f"{v:.0f} ns"
    if a < 1e6:
        return f"{v / 1e3:.1f} µs"
    if a < 1e9:
        return f"{v / 1e6:.2f} ms"
    return f"{v / 1e9:.3f} s"


def percent(x: Any) -> str:
    return "-" if x is None else f"{100 * float(x):.1f}%"


def count(n: Any) -> str:
    return "-" if n is None else f"{int(n):,}"


def nbytes(n: Any) -> str:
    if n is None:
        return "?"
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(v) < 1024 or unit == "GiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.1f} {unit}"
        v /= 1024
    return f"{v:.1f} GiB"  # pragma: no cover - loop always returns


def ratio(x: Any) -> str:
    return "-" if x is None else f"{float(x):.2f}x"


def text(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, (list, tuple)):
        return ",".join(map(str, v))
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


# -- tables -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Col:
    """One column: the frame's column, its header, how to show a value, and whether it
    gives up width (with an ellipsis in the middle, or at the end for ``tail=False``
    lists) when the terminal is narrow."""

    key: str
    header: str
    fmt: Format = text
    flex: bool = False
    right: bool = True
    tail: bool = True


def width() -> int:
    return shutil.get_terminal_size((120, 24)).columns


def table(df: pl.DataFrame, cols: Sequence[Col], max_width: int | None = None) -> str:
    """``df`` as aligned text no wider than the terminal."""
    limit = max_width or width()
    cells = [[c.fmt(v) for v in df.get_column(c.key).to_list()] for c in cols]
    widths = [max([len(c.header), *map(len, col)]) for c, col in zip(cols, cells, strict=True)]
    excess = sum(widths) + 2 * (len(cols) - 1) - limit
    floor = [max(len(c.header), 12) if c.flex else w for c, w in zip(cols, widths, strict=True)]
    while excess > 0:  # narrow the widest flexible column, one character at a time
        i = max(range(len(cols)), key=lambda k: widths[k] - floor[k])
        if widths[i] <= floor[i]:
            break
        widths[i] -= 1
        excess -= 1

    def fit(s: str, w: int, c: Col) -> str:
        if len(s) > w:  # a C++ signature first loses all but its identifying part
            s = short(s, w)
        if len(s) > w:  # names differ at the end as often as at the start: keep both
            keep = (w - 1) // 2 + (w - 1) % 2 if c.tail else w - 1
            s = s[:keep] + "…" + (s[len(s) - (w - 1 - keep):] if w - 1 - keep else "")
        return s.rjust(w) if c.right else s.ljust(w)

    head = "  ".join(fit(c.header, w, c) for c, w in zip(cols, widths, strict=True))
    lines = [click.style(head.rstrip(), bold=True)]
    for r in range(df.height):
        line = "  ".join(
            fit(cells[i][r], widths[i], c) for i, c in enumerate(cols)
        )
        lines.append(line.rstrip())
    return "\n".join(lines)


def heading(title: str) -> str:
    return click.style(title, bold=True, underline=True)


def echo(s: str = "") -> None:
    click.echo(s)


def warnings(diag: Diagnostics, verbose: int) -> None:
    """The readers' warnings on stderr under ``-v``; otherwise one line counting them."""
    total = sum(diag.counts.values())
    if not total:
        return
    if not verbose:
        click.echo(f"neurontrace: {total:,} warning(s) while reading (see -v)", err=True)
        return
    for line in diag.lines():
        click.echo(f"  warning: {line}", err=True)
