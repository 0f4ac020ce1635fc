"""Tables and figures for the terminal: formats of one cell, columns, tables fitted to the
width, lines of words wrapped to it, and the machine outputs (JSON, CSV).

Generic: nothing here knows an analysis. :mod:`neurontrace.views.terminal` and
:mod:`neurontrace.views.launches` lay out each command's results with it.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import click
import orjson
import polars as pl

from neurontrace.views.names import short

Format = Callable[[Any], str]


def emit_json(obj: Any) -> None:
    opts = orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE
    sys.stdout.buffer.write(orjson.dumps(obj, option=opts))
    sys.stdout.flush()


def records(df: pl.DataFrame) -> list[dict[str, Any]]:
    return df.to_dicts()


def emit_csv(df: pl.DataFrame) -> None:
    """``df`` as CSV on stdout: a header (the JSON keys), one line per row; a list
    (``layers``) as its items joined by commas in one quoted field, null as empty."""
    lists = [c for c, t in df.schema.items() if isinstance(t, pl.List)]
    flat = df.with_columns(pl.col(c).cast(pl.List(pl.String)).list.join(",") for c in lists)
    sys.stdout.buffer.write(flat.write_csv().encode())
    sys.stdout.flush()


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
    lists) when the terminal is narrow. A ``detail`` column is left out when the table
    cannot fit otherwise (see :func:`table_text`)."""

    key: str
    header: str
    fmt: Format = text
    flex: bool = False
    right: bool = True
    tail: bool = True
    detail: bool = False


def width() -> int:
    return shutil.get_terminal_size((120, 24)).columns


def known_width() -> int | None:
    """The width the user gave (``COLUMNS``) or stdout's terminal's; None when output
    goes to a file or a pipe without ``COLUMNS`` (lines of words are then not wrapped)."""
    try:
        given = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        given = 0
    if given > 0:
        return given
    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return None


_STYLE = re.compile(r"^((?:\x1b\[[0-9;]*m)*)(.*?)((?:\x1b\[[0-9;]*m)*)$", re.S)
_LABEL = re.compile(r"^(\s*\S+\s{2,})(?=\S)")


def wrapped(line: str, limit: int) -> list[str]:
    """``line`` in lines of at most ``limit`` visible characters, broken at spaces: the
    continuation lines indented past a leading label column (``high    fusion: ...``,
    where two or more spaces follow the first word) or two more than the line; a styled
    line (a heading) keeps its style on each piece (a line styled in part is wrapped
    plain). Shorter lines are unchanged."""
    if len(click.unstyle(line)) <= limit:
        return [line]
    m = _STYLE.match(line)
    assert m is not None  # the pattern matches any text
    pre, body, post = m.groups()
    if "\x1b" in body:  # styled inside: wrapped plain
        pre, body, post = "", click.unstyle(line), ""
    label = _LABEL.match(body)
    lead = len(body) - len(body.lstrip())
    indent = len(label.group(1)) if label and len(label.group(1)) <= 16 else lead + 2
    pieces = textwrap.wrap(body.lstrip(), width=limit, subsequent_indent=" " * indent,
                           initial_indent=" " * lead, break_long_words=True,
                           break_on_hyphens=False)
    return [pre + p + post for p in pieces] or [line]


def table_text(df: pl.DataFrame, cols: Sequence[Col], max_width: int | None = None) -> str:
    """``df`` as aligned text no wider than the terminal: flexible columns give up width
    first (down to 12 characters or their header); if the table is still too wide,
    ``detail`` columns are left out (the smallest total first, ties from the right: a
    column of zeros goes first) and a last line names them."""
    limit = max_width or width()
    cols = list(cols)
    cells = [[c.fmt(v) for v in df.get_column(c.key).to_list()] for c in cols]
    widths = [max([len(c.header), *map(len, col)]) for c, col in zip(cols, cells, strict=True)]
    floor = [max(len(c.header), 12) if c.flex else w for c, w in zip(cols, widths, strict=True)]
    left_out = []
    while sum(floor) + 2 * (len(cols) - 1) > limit:
        droppable = [i for i, c in enumerate(cols) if c.detail]
        if not droppable:
            break
        i = min(reversed(droppable), key=lambda k: _total(df.get_column(cols[k].key)))
        left_out.append(cols[i].header)
        del cols[i], cells[i], widths[i], floor[i]
    excess = sum(widths) + 2 * (len(cols) - 1) - limit
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
    if left_out:
        lines.append(f"(not shown at {limit} columns: {', '.join(left_out)}; see --json)")
    return "\n".join(lines)


def _total(values: pl.Series) -> float:
    """A column's sum, for the order detail columns are left out in (text: infinite)."""
    if not values.dtype.is_numeric():
        return float("inf")
    return float(values.fill_null(0).abs().sum())


def heading(title: str) -> str:
    return click.style(title, bold=True, underline=True)


def echo(s: str = "") -> None:
    click.echo(s)


def show(lines: Sequence[str]) -> None:
    """Print ``lines`` (what one of the functions below returned) on stdout; on a
    terminal, or with ``COLUMNS`` set, a line of words wider than that is
    :func:`wrapped` (tables are already fitted: :func:`table_text`)."""
    limit = known_width()
    for text_ in lines:
        for line in text_.split("\n"):
            for piece in wrapped(line, limit) if limit else (line,):
                click.echo(piece)


def top_rows(table: pl.DataFrame, cols: Sequence[Col], top: int) -> list[str]:
    """The first ``top`` rows of ``table`` (all for 0) as a table, and how many more
    there are."""
    shown = table.head(top) if top else table
    out = [table_text(shown, cols)]
    if shown.height < table.height:
        out.append(f"... {table.height - shown.height:,} more (--top 0 shows all)")
    return out
