"""Options shared by every command."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
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


def _set_filter(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Store a filter option's value (parsed by :mod:`neurontrace.analyses.filters`) in
    ``ctx.meta``, where :func:`events` reads it; a bad spelling is a usage error."""
    if value is None:
        return value
    from neurontrace.analyses import filters

    parse: dict[str, Callable[[str], Any]] = {"steps": filters.steps, "window": filters.window}
    try:
        parsed = parse[param.name](value) if param.name in parse else value
    except ValueError as e:
        raise click.BadParameter(str(e), ctx, param) from None
    ctx.meta.setdefault(_FILTERS, {})[param.name] = parsed
    return value


_FILTERS = "neurontrace.filters"


def filter_options(f: F) -> F:
    """``--step N[,M...]``, ``--rank N``, ``--window START:END``: what :func:`events`
    keeps of the trace (:mod:`neurontrace.analyses.filters` defines it)."""
    for opt in reversed((
        click.option("--step", "steps", metavar="N[,M...]", default=None,
                     expose_value=False, callback=_set_filter,
                     help="Only these ProfilerStep#N (device work: by its launching "
                          "op's step)."),
        click.option("--rank", "rank", type=RANK, default=None, expose_value=False,
                     callback=_set_filter, help="Only this rank."),
        click.option("--window", "window", metavar="START:END", default=None,
                     expose_value=False, callback=_set_filter,
                     help="Only rows starting in this time from the trace's start, with "
                          "units: 1.5ms:3ms, 200us:, :2s (device work: by its launching "
                          "op's start)."),
    )):
        f = opt(f)
    return f


class _Column(click.ParamType):
    """``--sort COLUMN``: a column of the command's table (its JSON keys; ``self`` for
    ``self_ns``), else a usage error naming them."""

    name = "column"

    def __init__(self, columns: Sequence[str]) -> None:
        self.columns = tuple(columns)

    def convert(self, value: object, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        v = str(value)
        for c in self.columns:
            if v in (c, c.removesuffix("_ns")):
                return c
        self.fail(f"{v!r} is not a column of this table ({', '.join(self.columns)})",
                  param, ctx)


def table_options(columns: Sequence[str], top: int | None = None) -> Callable[[F], F]:
    """The output options of an analysis command whose table has ``columns`` (its JSON
    objects' keys): ``--top N`` (when ``top`` is its default), ``--sort COLUMN``,
    ``--json``, ``--csv`` and ``-v``; the command takes ``top`` (when given), ``sort``,
    ``as_json`` and ``as_csv``."""
    def wrap(f: F) -> F:
        f = _one_format(f)
        f = verbose_option(f)
        f = click.option("--csv", "as_csv", is_flag=True,
                         help="Print CSV (a header, then every row unless --top is "
                              "given; the columns of --json).")(f)
        f = json_option(f)
        f = click.option("--sort", type=_Column(columns), default=None, metavar="COLUMN",
                         help=f"Order by this column: largest first, names A to Z "
                              f"({', '.join(columns)}).")(f)
        if top is not None:
            f = top_option(top)(f)
        return f
    return wrap


def _one_format(f: F) -> F:
    """``f`` refusing ``--json`` with ``--csv`` (a usage error) before it reads anything."""
    @functools.wraps(f)
    def run(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("as_json") and kwargs.get("as_csv"):
            raise click.UsageError("--json and --csv are one output each; give one")
        return f(*args, **kwargs)
    return run  # type: ignore[return-value]


def sorted_by(table: pl.DataFrame, column: str | None) -> pl.DataFrame:
    """``table`` ordered by ``column`` (``--sort``): numbers largest first, text and
    everything else ascending, nulls last, ties in their order; unchanged for None."""
    if column is None:
        return table

    numeric = table.schema[column].is_numeric()
    return table.sort(column, descending=numeric, nulls_last=True, maintain_order=True)


def machine_output(table: pl.DataFrame, n: int, as_json: bool, as_csv: bool) -> bool:
    """Print ``table`` (its first ``n`` rows; all for 0) as JSON or CSV when asked, and
    say whether it did (the command then prints no table); ``--json`` with ``--csv``
    never reaches here (:func:`table_options` refuses it first)."""
    if not (as_json or as_csv):
        return False
    from neurontrace.views import terminal

    shown = table.head(n) if n else table
    if as_json:
        terminal.emit_json(terminal.records(shown))
    else:
        terminal.emit_csv(shown)
    return True


def rows_shown(top: int, as_json: bool) -> int:
    """How many rows the command prints: ``top`` (0: all), except that machine output
    (``--json``) is complete unless ``--top`` was given on the command line."""
    ctx = click.get_current_context()
    given = ctx.get_parameter_source("top") is not ParameterSource.DEFAULT
    return top if given or not as_json else 0


def path_argument(f: F) -> F:
    """A trace, a run folder, or what ``convert`` wrote."""
    return click.argument("path", type=click.Path(path_type=Path))(f)


def analysis_options(columns: Sequence[str], top: int | None = None) -> Callable[[F], F]:
    """What every table command takes: PATH, :func:`filter_options` and
    :func:`table_options` (``columns``, ``top``)."""
    def wrap(f: F) -> F:
        return path_argument(filter_options(table_options(columns, top)(f)))
    return wrap


def events(path: str | os.PathLike[str]) -> pl.LazyFrame:
    """The events of ``path`` for a command, narrowed by its :func:`filter_options`
    (:func:`neurontrace.analyses.filters.keep`; a rank or step the trace lacks is bad
    input): :func:`neurontrace.analyses.events`, a raw
    trace converted once into the cache (:func:`neurontrace.loading.cache_folder`) and
    reused while its bytes are the same, with a progress bar while it is converted, and
    the readers' warnings reported on stderr (counted; listed under ``-v``)."""
    from neurontrace import analyses
    from neurontrace.analyses import filters
    from neurontrace.cli.progress import Bar
    from neurontrace.diagnostics import Diagnostics
    from neurontrace.errors import BadInput
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
    chosen = filters.Filter(**ctx.meta.get(_FILTERS, {})) if ctx is not None \
        else filters.Filter()
    if chosen:
        why = filters.missing(lf, chosen)
        if why is not None:
            raise BadInput(f"{path}: {why}")
        lf = filters.keep(lf, chosen)
    return lf
