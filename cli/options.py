"""Options shared by every command."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

if TYPE_CHECKING:  # polars is not imported by commands that do not need it (capture)
    import polars as pl

F = TypeVar("F", bound=Callable[..., Any])


#: ``--rank``: a rank is stored as a 64-bit integer; one outside that range is a usage
#: error (exit 2), not an overflow later.
class _Rank(click.ParamType):
    """A rank: an integer from 0 that fits the table's int64 column (a usage error
    otherwise, not an overflow later)."""

    name = "rank"

    def convert(self, value: object, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        try:
            rank = int(str(value), 10)
        except ValueError:
            self.fail(f"{value!r} is not an integer", param, ctx)
        if not 0 <= rank < (1 << 63):
            self.fail(f"{value} is not a rank (0 to 2**63-1)", param, ctx)
        return rank


RANK = _Rank()


def _set_verbose(ctx: click.Context, _param: click.Parameter, value: int) -> int:
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = max(ctx.obj.get("verbose", 0), value)
    return value


def verbose_option(f: F) -> F:
    """``-v`` after the command name too (``neurontrace convert a b -v``)."""
    return click.option(
        "-v", "--verbose", count=True, expose_value=False, callback=_set_verbose,
        help="Show warnings (and tracebacks of bugs).",
    )(f)


def json_option(f: F) -> F:
    """``--json``: machine-readable output on stdout (field names are the library's)."""
    return click.option(
        "--json", "as_json", is_flag=True, help="Print JSON instead of a table.",
    )(f)


def top_option(default: int) -> Callable[[F], F]:
    """``--top N``: how many rows to show (0 for all); see :func:`rows_shown`."""
    return click.option(
        "--top", type=click.IntRange(min=0), default=default, show_default=True,
        help="Show the N largest rows (0: all; --json prints all unless --top is given).",
    )


def rows_shown(top: int, as_json: bool) -> int:
    """How many rows the command prints: ``top`` (0: all), except that machine output
    (``--json``) is complete unless ``--top`` was given on the command line."""
    ctx = click.get_current_context()
    given = ctx.get_parameter_source("top") is not ParameterSource.DEFAULT
    return top if given or not as_json else 0


def path_argument(f: F) -> F:
    """A trace, a run folder, or what ``convert`` wrote."""
    return click.argument("path", type=click.Path(path_type=Path))(f)


def events(path: str | os.PathLike[str]) -> pl.LazyFrame:
    """The events of ``path`` for a command: :func:`neurontrace.analyses.events`, a raw
    trace converted once into the cache (:func:`neurontrace.loading.cache_folder`) and
    reused while its bytes are the same, with a progress bar while it is converted, and
    the readers' warnings reported on stderr (counted; listed under ``-v``)."""
    from neurontrace import analyses
    from neurontrace.cli.progress import Bar
    from neurontrace.diagnostics import Diagnostics
    from neurontrace.loading import cache_folder
    from neurontrace.views import terminal

    diag = Diagnostics()
    bar = Bar("converting")  # drawn only on a terminal, and only while a raw trace is read
    try:
        lf = analyses.events(path, diag=diag, progress=bar, cache=cache_folder())
    finally:
        bar.close()
    ctx = click.get_current_context(silent=True)
    terminal.warnings(diag, (ctx.obj or {}).get("verbose", 0) if ctx is not None else 0)
    return lf
