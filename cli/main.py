"""Entry point and the one error boundary: library errors become one line and an exit code.

Exit codes: 0 success, 2 bad input (the user's file or arguments), 1 a bug in neurontrace
(shown with a traceback only under ``-v``).
"""

from __future__ import annotations

import sys
import traceback
from typing import Any

import click

from neurontrace import __version__
from neurontrace.errors import NeurontraceError

class Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except NeurontraceError as e:
            click.echo(f"neurontrace: error: {e}", err=True)
            ctx.exit(e.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except KeyboardInterrupt:
            click.echo("neurontrace: interrupted", err=True)
            ctx.exit(130)
        except BrokenPipeError:
            ctx.exit(0)
        except Exception as e:  # a bug: say so, in one line unless -v
            verbose = (ctx.obj or {}).get("verbose", 0)
            if verbose:
                traceback.print_exc()
            click.echo(
                f"neurontrace: internal error ({type(e).__name__}: {e}); this is a bug, "
                "rerun with -v for the traceback",
                err=True,
            )
            ctx.exit(1)

@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="Show warnings (and tracebacks of bugs).")
@click.version_option(__version__, prog_name="neurontrace")
@click.pass_context
def cli(ctx: click.Context, verbose: int) -> None:
    """Profiler traces of PyTorch runs (Trainium, CUDA, CPU) as one Parquet event table."""
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose

def main() -> None:
    cli(prog_name="neurontrace")

from neurontrace.cli.convert import convert  # noqa: E402

cli.add_command(convert)

if __name__ == "__main__":
    sys.exit(main())
