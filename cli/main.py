"""Entry point and the one error boundary: library errors become one line and an exit code.

Exit codes: 0 success, 2 bad input (the user's file or arguments), 1 a bug in neurontrace
(shown with a traceback only under ``-v``). Commands are imported when invoked, so that
``neurontrace capture`` does not pay for the analysis stack and ``--help`` is instant.
"""

from __future__ import annotations

import importlib
import traceback
from typing import Any

from neurontrace.quickstart import arrow_without_pandas, before_imports

before_imports()  # before anything imports Polars or NumPy

import click  # noqa: E402

from neurontrace import __version__  # noqa: E402
from neurontrace.cli.options import verbose_option  # noqa: E402
from neurontrace.errors import NeurontraceError  # noqa: E402

#: command name -> module under neurontrace.cli defining a click command of that name.
COMMANDS: dict[str, str] = {
    "capture": "capture",
    "convert": "convert",
    "ops": "ops",
    "gaps": "gaps",
    "copies": "copies",
    "steps": "steps",
    "report": "report",
    "compare": "compare",
    "export": "export",
}


class Group(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        if name not in ("capture", "convert"):  # these read traces with pyarrow
            arrow_without_pandas()  # (convert does it itself, once its workers start)
        module = importlib.import_module(f"neurontrace.cli.{COMMANDS[name]}")
        cmd = getattr(module, name.replace("-", "_"))
        assert isinstance(cmd, click.Command)
        return cmd

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
            if (ctx.obj or {}).get("verbose", 0):
                traceback.print_exc()
            click.echo(
                f"neurontrace: internal error ({type(e).__name__}: {e}); this is a bug, "
                "rerun with -v for the traceback",
                err=True,
            )
            ctx.exit(1)


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@verbose_option
@click.version_option(__version__, prog_name="neurontrace")
def cli() -> None:
    """Profiler traces of PyTorch runs (Trainium, CUDA, CPU) as one Parquet event table."""


def main() -> None:
    cli(prog_name="neurontrace")


if __name__ == "__main__":
    main()
