"""``neurontrace capture``."""

from __future__ import annotations

import warnings
from pathlib import Path

import click

from neurontrace.capture import devices
from neurontrace.capture.session import DEFAULT_STEPS
from neurontrace.cli.options import verbose_option


def _log(message: str) -> None:
    click.echo(f"capture: {message}", err=True)


@click.command(context_settings={"allow_interspersed_args": False})
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--workload", default=None, metavar="rmsnorm|FILE.py",
              help="What to profile: the bundled RMSNorm study (default) or a Python file "
                   "defining workload(device).")
@click.option("--device", type=click.Choice(devices.CHOICES), default="auto",
              show_default=True, help="Where to run: the best present, or this one.")
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Run folder (default runs/<workload>-<time>); an earlier run there is "
                   "replaced.")
@click.option("--steps", type=click.IntRange(min=1), default=DEFAULT_STEPS,
              show_default=True, help="Profiled steps per variant (or per rank).")
@click.option("--warmup", type=click.IntRange(min=1), default=3, show_default=True,
              help="Calls per variant before profiling, compilation included.")
@click.option("--shape", default=None, metavar="BxSxH",
              help="rmsnorm input shape (default 1x2048x4096).")
@click.option("--dtype", type=click.Choice(["auto", "float32", "bfloat16", "float16"]),
              default=None, help="rmsnorm dtype (default: bfloat16 on accelerators, "
                                 "float32 on CPU).")
@click.option("--check/--no-check", default=True, show_default=True,
              help="Compare the variants' outputs before profiling.")
@click.option("--convert/--no-convert", default=True, show_default=True,
              help="Convert the traces to Parquet (neurontrace convert) afterwards.")
@verbose_option
@click.pass_context
def capture(ctx: click.Context, command: tuple[str, ...], workload: str | None, device: str,
            out: Path | None, steps: int, warmup: int, shape: str | None,
            dtype: str | None, check: bool, convert: bool) -> None:
    """Profile the RMSNorm study, a FILE.py workload, or (after --) your own command.

    \b
    neurontrace capture                          # the RMSNorm study, best device
    neurontrace capture --workload my.py --device cuda
    neurontrace capture --out runs/train -- torchrun --nproc_per_node 2 train.py

    Ends with a short report and the neurontrace compare command for the variants.
    """
    from neurontrace.errors import BadInput

    # torch warns at import when numpy is absent; nothing here needs numpy.
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    argv = _command_line(ctx)
    if command:
        if workload or shape or dtype:
            raise BadInput("--workload, --shape and --dtype describe the bundled study; "
                           "with -- CMD the command profiles itself")
        from neurontrace.capture import command as run_command

        ran = run_command.run(list(command), device=device, out=out, steps=steps,
                              convert=convert, argv=argv, log=_log)
        click.echo(f"{ran.out}: {len(ran.ranks)} rank(s) from {' '.join(ran.command)}")
        _report([(r, ran.out / r / c["output"]) for r, c in ran.converted.items()
                 if c["output"]], [], label="rank")
        return
    from neurontrace.capture import study

    run = study.run(workload or "rmsnorm", device=device, out=out, steps=steps,
                    warmup=warmup, shape=shape, dtype=dtype, check=check, convert=convert,
                    argv=argv, log=_log)
    params = run.workload.params
    what = " ".join(str(x) for x in (
        "x".join(map(str, params["shape"])) if "shape" in params else None,
        params.get("dtype")) if x)
    click.echo(f"{run.out}: {run.workload.name} on {run.device.kind} ({run.device.name})"
               f"{', ' + what if what else ''}, {run.steps} steps")
    _report([(v.name, run.out / v.events) for v in run.variants if v.events],
            [(v.name, v.reason or "") for v in run.variants if v.status == "skipped"])


def _command_line(ctx: click.Context) -> list[str]:
    """The command as run, in a canonical form that reruns it (defaults left out)."""
    argv = ["neurontrace", ctx.info_name or "capture"]
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.expose_value is False:
            continue
        value = ctx.params.get(param.name or "")
        if value is None or value == param.default:
            continue
        if param.is_flag and param.secondary_opts:
            argv.append(param.opts[0] if value else param.secondary_opts[0])
        else:
            argv += [param.opts[0], str(value)]
    command = ctx.params.get("command") or ()
    return argv + (["--", *command] if command else [])


def _report(events: list[tuple[str, Path]], skipped: list[tuple[str, str]],
            label: str = "variant") -> None:
    if not events:
        return
    from neurontrace.capture import report
    from neurontrace.views import terminal

    summaries = [report.summarise(name, path) for name, path in events]
    summaries += [report.Summary(name, skipped=reason) for name, reason in skipped]
    for line in terminal.capture_summary(summaries, label):
        click.echo(f"  {line}")
    if len(events) > 1:
        click.echo("compare them:")
        click.echo(f"  {report.compare_command([p for _, p in events])}")
