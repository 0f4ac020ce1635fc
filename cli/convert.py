"""``neurontrace convert``.

This module imports neither Arrow nor Polars (nor the readers, which do): a conversion
that will decode its input in parallel starts its worker processes first, and they
import those alongside this process (see :mod:`neurontrace.workers.splitting`).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import click

import neurontrace
from neurontrace.cli.options import RANK, verbose_option
from neurontrace.cli.progress import Bar
from neurontrace.io.scratch import Terminated, sigterm_raises
from neurontrace.workers.executors import EXECUTORS
from neurontrace.workers.settings import arrow_without_pandas

#: The variable ``--explorer-timeout`` sets (``neurontrace.readers.neuron.raw.TIMEOUT_ENV``;
#: not imported from there: this module imports no reader).
EXPLORER_TIMEOUT = "NEURONTRACE_EXPLORER_TIMEOUT"


class _Formats(click.Choice):
    """The readers' names as a choice, looked up only when ``--format`` is given or help
    is shown (the registry imports every reader)."""

    def __init__(self) -> None:
        super().__init__(())

    @property  # type: ignore[override]
    def choices(self) -> tuple[str, ...]:
        from neurontrace.readers import READERS

        return tuple(sorted(READERS))

    @choices.setter
    def choices(self, _: object) -> None:
        pass  # click.Choice sets it


@click.command()
@click.argument("paths", nargs=-1, required=True, metavar="INPUTS... [OUT]")
@click.option(
    "--format", "fmt", type=_Formats(), default=None,
    help="Input format, instead of detecting it.",
)
@click.option("--rank", type=RANK, default=None, help="Rank to record, instead of the trace's.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=1, show_default=True,
              help="Inputs converted at once, each in its own process (local executor).")
@click.option("--executor", type=click.Choice(EXECUTORS), default="local", show_default=True,
              help="Where inputs are converted: local processes, or one Ray task each.")
@click.option("--address", default=None, metavar="ADDR",
              help="Ray cluster to connect to (ray.init(address=ADDR); default "
                   "$RAY_ADDRESS, else a local Ray).")
@click.option("--force", is_flag=True,
              help="Convert every input again, even if an unchanged output is there.")
@click.option("--progress/--no-progress", default=None,
              help="Progress bar on stderr (default: when stderr is a terminal).")
@click.option("--explorer-timeout", type=click.FloatRange(min=0, min_open=True),
              default=None, metavar="SECONDS",
              help="Seconds neuron-explorer may take to decode a raw Neuron capture before "
                   "it is killed (default $NEURONTRACE_EXPLORER_TIMEOUT, else 600).")
@verbose_option
@click.pass_context
def convert(ctx: click.Context, paths: tuple[str, ...], fmt: str | None,
            rank: int | None, jobs: int, executor: str, address: str | None, force: bool,
            progress: bool | None, explorer_timeout: float | None) -> None:
    """Convert INPUTS (traces, or folders of them) to Parquet at OUT.

    One input file writes one Parquet file. Several inputs, a folder, or an OUT that is a
    folder (written with a trailing slash, OUT/, or an existing folder: empty, or a
    dataset written before) write a dataset folder partitioned by rank
    (OUT/rank=N/NAME.parquet). With one input and no OUT, the output goes beside the
    input, named after it with .gz and .json dropped and .parquet added
    (runs/trace.json.gz -> runs/trace.parquet; the folder runs/demo -> runs/demo.parquet),
    and never replaces a file neurontrace did not write. OUT is a local path or a
    filesystem URI (file://, s3://, ...). Outputs whose input is unchanged (same content
    hash, options and neurontrace version) are kept, so a rerun resumes. The output
    appears only when complete; inputs are never modified (an OUT that is, holds or
    lies inside an input is refused). Temporary files go to one hidden folder next to
    OUT, removed when the command ends (also on Ctrl-C or SIGTERM); they may take half
    the free disk space at most, or NEURONTRACE_SPILL_LIMIT bytes (e.g. 500G).
    """
    verbose = (ctx.obj or {}).get("verbose", 0)
    inputs, out = _split(paths)
    if explorer_timeout is not None:  # read by neurontrace.readers.neuron.raw
        before = os.environ.get(EXPLORER_TIMEOUT)
        os.environ[EXPLORER_TIMEOUT] = repr(explorer_timeout)
        ctx.call_on_close(lambda: _restore(EXPLORER_TIMEOUT, before))
    with sigterm_raises():
        try:
            result = _run(inputs, out, fmt, rank, jobs, executor, address, force, progress)
        except Terminated:
            click.echo("neurontrace: terminated (SIGTERM)", err=True)
            ctx.exit(Terminated.exit_code)
    d = result.diagnostics
    warned = sum(d.counts.values())
    click.echo(
        f"{out}: {result.rows:,} events from {len(result.inputs)} input(s)"
        + (f", {len(result.kept)} unchanged output(s) kept" if result.kept else "")
        + (f", {warned:,} warning(s) (see -v)" if warned and not verbose else ""),
        err=True,
    )
    for note in d.notes:
        click.echo(f"  note: {note}", err=True)
    if verbose:
        for line in d.lines():
            click.echo(f"  warning: {line}", err=True)
        for f in result.skipped:
            click.echo(f"  skipped (no known format): {f}", err=True)
        for f in result.kept:
            click.echo(f"  kept (input unchanged): {f}", err=True)


def _run(inputs: tuple[Path, ...], out: str, fmt: str | None, rank: int | None, jobs: int,
         executor: str, address: str | None, force: bool,
         progress: bool | None) -> neurontrace.Converted:
    if len(inputs) == 1 and fmt in (None, "kineto") and _regular_file(inputs[0]):
        from neurontrace.workers.splitting import start_workers

        start_workers(inputs[0])
    arrow_without_pandas()
    bar = Bar("converting", progress)
    try:
        return neurontrace.convert(list(inputs) if len(inputs) > 1 else inputs[0], out,
                                   fmt=fmt, rank=rank, progress=bar, jobs=jobs,
                                   executor=executor, address=address, force=force)
    finally:
        bar.close()


#: Suffixes :func:`default_output` drops from an input's name, outermost first.
DROPPED_SUFFIXES = (".gz", ".json")


def default_output(src: str | os.PathLike[str]) -> Path:
    """Where ``neurontrace convert IN`` writes when no ``OUT`` is given: beside ``IN``,
    named after it with ``.gz`` and then ``.json`` dropped (any case) and ``.parquet``
    added: ``runs/trace.json.gz`` -> ``runs/trace.parquet``, ``rank0.pt.trace.json`` ->
    ``rank0.pt.trace.parquet``, ``profile.ntff`` -> ``profile.ntff.parquet``, the folder
    ``runs/demo/`` -> ``runs/demo.parquet`` (a dataset folder when it holds several
    traces). BadInput for a path with no name to derive one from (``/``)."""
    given = Path(src)
    path = given if given.name not in ("", ".", "..") else Path(os.path.abspath(src))
    name = path.name
    if not name:
        raise neurontrace.BadInput(f"{src}: no name to name the output after; give OUT")
    for suffix in DROPPED_SUFFIXES:
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            name = name[: -len(suffix)]
    return path.with_name(f"{name}.parquet")


def _split(paths: tuple[str, ...]) -> tuple[tuple[Path, ...], str]:
    """INPUTS and OUT: the last of several paths is OUT; one path alone is the input,
    written to :func:`default_output` (refused, exit 2, when a file
    or folder neurontrace did not write is there)."""
    if len(paths) > 1:
        return tuple(Path(p) for p in paths[:-1]), paths[-1]
    out = default_output(paths[0])
    if os.path.lexists(out) and not _written_by_us(out):
        raise neurontrace.BadInput(
            f"{out}: exists and was not written by neurontrace; it is not replaced "
            f"(name the output: neurontrace convert {paths[0]} OUT)")
    return (Path(paths[0]),), str(out)


def _written_by_us(path: Path) -> bool:
    from neurontrace.convert import written_by_us  # imports Arrow: only when ``path`` exists

    return written_by_us(path)


def _restore(name: str, value: str | None) -> None:
    """Put the environment variable ``name`` back to ``value`` (None: unset)."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _regular_file(path: Path) -> bool:
    """Whether ``path`` is a regular file (never opened otherwise: a FIFO would block)."""
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False
